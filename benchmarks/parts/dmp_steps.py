"""A task's plans trained once a round in one DMP launch, for the studies judged by real
TorchRec steps (`torchrec`, `reference_calibration`, `torchrec_step`): each distinct plan once,
and every arm's slowest-rank median step by the wall clock and by the ranks' CPU time.
"""

from __future__ import annotations

from dreamshard.integrations.dmp_backend import DmpBackend
from dreamshard.placement.tasks import PlacementTask

DMP, DMP_CPU = "dmp", "dmp cpu"


def launch_steps(
    backend: DmpBackend, task: PlacementTask, plans: dict, apart: tuple[str, ...] = ()
) -> dict[str, dict[str, float]]:
    """{arm: {dmp: ms, dmp cpu: ms}} from one launch of one round; an arm in `apart` trains as
    a plan of its own even where its plan is another arm's (a control of the noise)."""
    keys = [arm if arm in apart else (p.devices, p.splits) for arm, p in plans.items()]
    distinct = dict(zip(keys, plans.values()))
    order = list(distinct)
    run = backend.measure_plans(task, list(distinct.values()), rounds=1)
    wall, cpu = run.overall("wall")[0], run.overall("cpu")[0]
    return {
        arm: {DMP: float(wall[order.index(key)]), DMP_CPU: float(cpu[order.index(key)])}
        for arm, key in zip(plans, keys)
    }

"""Choosing a cost backend by name."""

from __future__ import annotations

from dreamshard.costs.hardware import load_hardware
from dreamshard.costs.types import CostBackend
from dreamshard.errors import DreamshardError
from dreamshard.lazy import load_object

BACKENDS = ("fbgemm", "simulated", "dmp")
# judges that time nothing and model hardware that need not be here: for `measure` only
JUDGES = ("torchrec-estimator",)
TIMING = ("fbgemm", "dmp")  # backends that time this host: its hardware file only
# The dmp backend runs TorchRec training steps: it lives with the TorchRec code, above this stage
DMP = "dreamshard.integrations.dmp_backend"
ESTIMATOR = "dreamshard.integrations.torchrec_judge:TorchRecEstimatorBackend"


def make_backend(
    name: str,
    iterations: int | None = None,
    launcher: str = "inprocess",
    topology: str = "auto",
    rounds: int | None = None,
    hardware: str | None = None,
    reference: bool = True,
) -> CostBackend:
    """`fbgemm` (real kernels on this host), `simulated` (the analytic model of `hardware`:
    the calibrated CPU model, or a GPU file's roofline), `dmp` (real TorchRec training steps
    under torchrun; `iterations` sets its timed steps and `rounds` its interleaved rounds a
    launch, of which a label is the median) or `torchrec-estimator` (TorchRec's perf model
    with a GPU hardware file's constants; times nothing). `hardware`: a hardware file's name
    or path (None: cpu; the estimator's, TorchRec's own constants). `reference` False: fbgemm
    times no reference group (`costs/reference.py`; records then have no normalised cost)."""
    if rounds is not None and name != "dmp":
        raise DreamshardError(
            f"measurement rounds apply to the dmp backend only, not {name!r}; drop the rounds"
        )
    chosen = load_hardware(hardware) if hardware is not None else None
    if name in TIMING and chosen is not None and chosen.is_gpu:
        raise DreamshardError(
            f"the {name} backend times this host; --hardware {hardware} applies to the simulated "
            "and torchrec-estimator judges (drop --hardware, or give --hardware cpu)"
        )
    if name in JUDGES and (iterations is not None or launcher != "inprocess"):
        raise DreamshardError(
            f"the {name} judge times nothing; drop --iterations, --rounds and --launcher"
        )
    build = BUILDERS.get(name)
    if build is None:
        known = ", ".join(BACKENDS + JUDGES)
        raise DreamshardError(f"unknown backend {name!r}; choose one of {known}")
    return build(
        iterations, launcher, None if topology == "auto" else topology, rounds, chosen, reference
    )


def _fbgemm(iterations, launcher, topology, _rounds, _hardware, reference) -> CostBackend:
    from dreamshard.costs.fbgemm import FbgemmBackend
    from dreamshard.costs.tbe import TimingConfig

    timing = TimingConfig(iterations=iterations) if iterations else TimingConfig()
    return FbgemmBackend(
        timing=timing, topology=topology or "auto", launcher=launcher, reference=reference
    )


def _simulated(_iterations, _launcher, topology, _rounds, hardware, _reference) -> CostBackend:
    from dreamshard.costs.simulated import SimulatedBackend

    return SimulatedBackend(topology=topology, hardware=hardware)


def _dmp(iterations, _launcher, _topology, rounds, _hardware, _reference) -> CostBackend:
    step_config = load_object(f"{DMP}:StepConfig")
    steps = step_config(steps=iterations) if iterations else step_config()
    backend = load_object(f"{DMP}:DmpBackend")
    return backend(steps, rounds=rounds) if rounds else backend(steps)


def _estimator(_iterations, _launcher, topology, _rounds, hardware, _reference) -> CostBackend:
    return load_object(ESTIMATOR)(hardware, topology)


# name -> (iterations, launcher, topology or None, rounds, hardware file or None, reference)
# -> backend (reference: fbgemm's reference group; the others time none)
BUILDERS = {"fbgemm": _fbgemm, "simulated": _simulated, "dmp": _dmp, JUDGES[0]: _estimator}


def describe_costs(config: dict) -> str:
    """How a backend's costs were made, in words: hardware, precision, communication."""
    name = config.get("backend", "?")
    describe = DESCRIBERS.get(name)
    return describe(config) if describe is not None else f"{name} backend"


def _precision(config: dict) -> tuple[str, str]:
    """(device, weights' precision) of a backend that ran on `config`'s device."""
    device = config.get("device", "?")
    return device, "fp16" if device == "cuda" else "fp32"


def _describe_fbgemm(config: dict) -> str:
    device, precision = _precision(config)
    topology = config.get("topology", "?")
    comm = (
        "all-to-all measured (torchrun)"
        if topology == "measured"
        else f"all-to-all modeled ({topology} topology)"
    )
    return (
        f"fbgemm backend (measured): fused kernels timed on {device}, {precision} weights; {comm}"
    )


def _describe_simulated(config: dict) -> str:
    comm = f"all-to-all modeled ({config.get('topology', '?')} topology)"
    if "hardware" in config:
        hardware = config["hardware"]
        return (
            f"simulated backend (not measured): the GPU kernel roofline of hardware file "
            f"{hardware['name']} (sha256 {hardware['sha256'][:12]}); {comm}"
        )
    return (
        "simulated backend (not measured): the analytic cost model fitted to fbgemm CPU "
        f"measurements; {comm}"
    )


def _describe_estimator(config: dict) -> str:
    hardware = config.get("hardware")
    which = hardware["name"] if isinstance(hardware, dict) else "TorchRec's default"
    return (
        f"TorchRec's EmbeddingPerfEstimator (not measured) with {which} constants; "
        "communication modeled by TorchRec"
    )


def _describe_dmp(config: dict) -> str:
    clocks = load_object(f"{DMP}:CLOCKS")
    device, precision = _precision(config)
    steps = config.get("steps", {})
    group = "NCCL" if device == "cuda" else "gloo"
    return (
        f"dmp backend (measured): real TorchRec training steps (DistributedModelParallel, "
        f"fused kernels and optimizer, dense tower, all-to-alls) under torchrun, one rank "
        f"per device on {device} ({group}), {precision} weights; the slowest rank's median "
        f"of {steps.get('steps', '?')} steps after {steps.get('warmup', '?')} warm-up "
        f"({clocks[steps.get('clock', 'wall')]}), the whole step in fwd_comp (not split "
        "into terms)"
        + (", each rank bound to a core of its own" if steps.get("pin") else "")
        + (
            "; the plans' steps interleaved one by one"
            if steps.get("interleave") == "steps"
            else "; each plan's steps in a turn of their own"
        )
        + (
            f"; a label: the median over {config['rounds']} interleaved rounds beside the "
            f"task's {config['reference']} plan"
            if "rounds" in config
            else ""
        )
    )


# a backend's name -> its config (`CostBackend.config()`, or one stored in a record) in words
DESCRIBERS = {
    "fbgemm": _describe_fbgemm,
    "simulated": _describe_simulated,
    "dmp": _describe_dmp,
    JUDGES[0]: _describe_estimator,
}

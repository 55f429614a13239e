"""`DreamShardPlanner`: dreamshard behind TorchRec's planner interface, for DMP.

    planner = DreamShardPlanner(topology, model="models:/dreamshard-policy@champion")
    plan = planner.collective_plan(model, sharders, pg)
    model = DistributedModelParallel(model, device=device, plan=plan, sharders=sharders)

It reads every `EmbeddingBagCollection` in the model (`torchrec_tables`), makes one placement
task over all their tables with the memory of TorchRec's `Topology` (after TorchRec's storage
reservation unless `reserve=False`), places it with any registered method (`placement.registry`),
and hands back the placement as a `ShardingPlan` with one module plan per collection
(`torchrec_export`), its shards on the topology's compute device. It plans within what each
collection's sharder offers on the compute device, as TorchRec's planner does: the sharding
types with a kernel there become `Constraints.offered` (a sharder offering only column_wise
gives a column-wise plan, whole tables as one column shard; only row_wise, a row-wise one; the
default sharder on a CPU, no row-wise), and each entry takes the sharder's kernel (fused, else
dense, else its first). A table no offered kind holds, or a model without tables, is one
DreamshardError line, on every rank under `collective_plan`.
Importing this module imports TorchRec (`make torchrec`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import torch.distributed as dist

from dreamshard.costs.hardware import GENERIC_GPU, detect_hardware, load_hardware
from dreamshard.errors import DreamshardError
from dreamshard.integrations.rank_zero import on_rank_zero
from dreamshard.integrations.reference_plan import (
    TORCHREC_SHARE,
    Reference,
    distinct_name,
    heuristic_reference,
    interleaved,
    more_replicas,
    on_layout,
    plan_key,
    reference_budget,
    torchrec_reference,
    weigh_plan,
    whole_heuristics,
)
from dreamshard.integrations.torchrec_export import (
    INDEXED_DEVICES,
    sharding_plan_from_dict,
    torchrec_plan_dict,
)
from dreamshard.integrations.torchrec_planner import INSTALL_HINT, quiet_torchrec
from dreamshard.integrations.torchrec_tables import (
    ModelTable,
    embedding_bag_collections,
    model_tables,
)
from dreamshard.placement.budget import default_time_budget
from dreamshard.placement.constraints import SHARDING_KINDS, Constraints, joined
from dreamshard.placement.planner import PlanOptions
from dreamshard.placement.reference import (
    CALIBRATION_FILE,
    Calibration,
    Verdict,
    load_calibration,
)
from dreamshard.placement.registry import registration
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import format_bytes

try:
    from torchrec.distributed.types import ShardingPlanner
except ImportError:
    raise DreamshardError(INSTALL_HINT) from None

TORCHREC_BATCH_SIZE = 512  # torchrec.distributed.planner.constants.BATCH_SIZE
# TorchRec's fused optimizers (EmbOptimType values) by whose state they keep, as we count it
# (dreamshard.tables.table.OPTIMIZER_STATE_WORDS); partial row-wise Adam/LAMB counted as Adam.
FUSED_OPTIMIZERS = {
    "sgd": "sgd",
    "exact_sgd": "sgd",
    "adagrad": "adagrad",
    "exact_adagrad": "adagrad",
    "row_wise_adagrad": "rowwise_adagrad",
    "exact_row_wise_adagrad": "rowwise_adagrad",
    "adam": "adam",
    "lamb": "adam",
    "partial_row_wise_adam": "adam",
    "partial_row_wise_lamb": "adam",
}


class DreamShardPlanner(ShardingPlanner):
    """TorchRec's `ShardingPlanner` with a dreamshard method inside (by default the registered
    `dreamshard` method, `planners.dreamshard_planner.DreamShardMethod`, which this adapter runs
    on TorchRec's model, topology and constraints).

    `topology`: TorchRec's `Topology` (world size, compute device, HBM/DDR per device); None
    builds one from the initialised process group, as TorchRec's planner does. Device memory is
    the smallest device's HBM (cuda) or DDR (cpu). `reserve`: True applies TorchRec's default
    `HeuristicalStorageReservation` (15%, input batches, dense parameters) first, False plans on
    the whole memory, or pass any TorchRec `StorageReservation`. `method`: a name from
    `dreamshard.METHODS`; `model`: what a learned method needs (a model file, a `train
    --out` folder, `models:/dreamshard-policy@champion`). `batches`: sample KeyedJaggedTensors for
    the tables' statistics (else the defaults of `torchrec_tables`); `batch_size`: the per-rank
    batch TorchRec's reservation assumes (default: the batches' size, else TorchRec's 512).
    `optimizer`: whose state counts beside the weights (`sgd`, `rowwise_adagrad`, `adagrad`,
    `adam`); default: the sharders' fused optimizer (`fused_params["optimizer"]`), else none.
    `split`: "auto" lets the method split tables column-wise (row-wise for a table no device
    holds; TorchRec shards rows on GPUs only), "none" keeps them whole (`docs/splitting.md`).
    `constraints`: dreamshard's `Constraints` (pins, groups, tables kept whole or sharded so),
    or TorchRec's `{table: ParameterConstraints}` where their sharding types map
    (`as_constraints`). `seed`, `samples` and `time_budget` (seconds; None: the method's
    default) are `dreamshard place`'s `--seed`, `--samples` and `--time-budget`: the method
    plans through the registry as `place` does, so the same task gives the same plan. Across
    hosts (world size above the topology's local world size) the method plans for the
    topology's hosts and its intra- and inter-host bandwidths (`links_of`); on one host it keeps
    its own exchange model (a model's: the one it was trained on).
    `hardware`: the hardware file planned for (a shipped name, a path or a `Hardware`; None:
    this host's, `costs.hardware.detect_hardware`, said in one log line). With a GPU file the
    `topology` gives the world size, memory and devices per host, and its bandwidths override
    the file's where they are not TorchRec's defaults (`planner_links`).
    """

    def __init__(
        self,
        topology=None,
        method: str = "dreamshard",
        model=None,
        batches=None,
        reserve=True,
        batch_size: int | None = None,
        optimizer: str | None = None,
        split: str = "auto",
        seed: int = 0,
        samples: int = 8,
        constraints=None,
        time_budget: float | None = None,
        hardware=None,
        reference: bool = True,
        calibration=None,
    ) -> None:
        self._planner = registration(method).load()  # DreamshardError naming the methods
        self.hardware = planner_hardware(hardware)
        self.topology = topology if topology is not None else default_topology()
        self.method, self.model, self.seed, self.samples = method, model, seed, samples
        self.time_budget = time_budget
        self.batches = list(batches) if batches is not None and not _is_kjt(batches) else batches
        self.reserve, self.optimizer, self.split = reserve, optimizer, split
        self.batch_size = batch_size or _batch_size(self.batches) or TORCHREC_BATCH_SIZE
        self.constraints = constraints  # ours, or TorchRec's (read per model: `as_constraints`)
        self._options = None  # with the method's model, loaded on the first plan
        self.reference = reference
        self.calibration = calibration  # a `Calibration` or its file; None: the shipped one
        self.verdict: Verdict | None = None  # the reference rule's, on the last plan
        self.reference_note = ""  # what the reference of the last plan was

    def tables(self, module) -> list[ModelTable]:
        """The model's tables as placed, with their statistics and where they sit."""
        return model_tables(module, self.batches)

    def task(self, module, sharders=None, tables: list[ModelTable] | None = None) -> PlacementTask:
        """The placement task the planner solves for `module`: its tables, the topology's
        devices and memory per device (after the reservation)."""
        tables = self.tables(module) if tables is None else tables
        sharders = sharders or default_sharders()
        precisions = {t.precision for t in tables}
        return PlacementTask(
            tuple(t.table for t in tables),
            self.topology.world_size,
            self.memory_per_device(module, sharders, tables),
            precision="fp16" if precisions == {"fp16"} else "fp32",  # mixed: counted wide
            name=f"{type(module).__name__} ({len(tables)} tables)",
            optimizer=self.optimizer or fused_optimizer(module, sharders),
            constraints=joined(
                as_constraints(self.constraints, tables),
                offered_constraints(module, sharders, tables, self.topology.compute_device),
            ),
        )

    def memory_per_device(self, module, sharders: list, tables: list[ModelTable]) -> int:
        """Bytes each device offers the tables: the smallest device's, after the reservation."""
        with quiet_torchrec():
            topology = self.reservation().reserve(
                self.topology, self.batch_size, module, sharders, pooling_constraints(tables)
            )
        kind = "hbm" if topology.compute_device in INDEXED_DEVICES else "ddr"
        return min(getattr(device.storage, kind) for device in topology.devices)

    def reservation(self):
        """The TorchRec `StorageReservation` this planner plans after (and TorchRec's with it)."""
        if self.reserve is True:
            return default_reservation()
        if self.reserve is False:
            from torchrec.distributed.planner.storage_reservations import (
                FixedPercentageStorageReservation,
            )

            return FixedPercentageStorageReservation(0.0)
        return self.reserve

    def torchrec_constraints(self, tables: list[ModelTable]) -> dict:
        """What TorchRec's planner is told of the tables: the user's own `ParameterConstraints`
        where given, else our pooling factors."""
        found = pooling_constraints(tables)
        if isinstance(self.constraints, dict):
            found.update(self.constraints)
        return found

    def plan(self, module, sharders=None):
        """A `ShardingPlan` for every EmbeddingBagCollection in `module`: the method's, or the
        reference's where the reference rule keeps it (`reference`)."""
        sharders = sharders or default_sharders()
        tables = self.tables(module)
        task = self.task(module, sharders, tables)
        placement, reference = self.placements(module, sharders, task, tables)
        if reference is not None and reference.sharding_plan is not None:
            return reference.sharding_plan  # TorchRec's own plan, as TorchRec made it
        chosen = reference.placement if reference is not None else placement
        return self.sharding_plan(module, sharders, task, chosen, tables)

    def placements(self, module, sharders: list, task: PlacementTask, tables: list[ModelTable]):
        """(the method's placement, the reference where the rule keeps it else None)."""
        if task.memory_cap_bytes <= 0:
            raise DreamshardError(
                f"DreamShardPlanner: the topology leaves no memory for tables on its "
                f"{task.num_devices} {self.topology.compute_device} devices after the reservation; "
                "give the devices more memory or pass reserve=False"
            )
        budget = self.budget(task)
        started = time.perf_counter()
        found, why = (None, "")
        if self.reference:
            found, why = torchrec_reference(self, module, sharders, task, tables, budget)
        options = self.method_options()
        if self.reference:  # the method has what TorchRec's planner left of the budget
            left = budget - (time.perf_counter() - started)
            options = replace(options, time_budget=max(left, budget * (1 - TORCHREC_SHARE)))
        try:
            placement = self._planner.place(task, options)
        except DreamshardError as exc:
            raise DreamshardError(
                f"DreamShardPlanner ({self.method}) cannot place the model's {len(tables)} tables "
                f"on {task.num_devices} {self.topology.compute_device} devices of "
                f"{format_bytes(task.memory_cap_bytes)}: {exc}"
            ) from None
        self.verdict, self.reference_note = None, ""
        if not self.reference:
            return placement, None
        return placement, self.weigh_reference(task, placement, found, why, options)

    def budget(self, task: PlacementTask) -> float:
        """Seconds for a plan: the given budget, else the method's default, at least 4 s with
        the reference on (`reference_plan.reference_budget`)."""
        if self.reference:
            return reference_budget(len(task.tables), self.time_budget)
        return self.time_budget or default_time_budget(len(task.tables))

    def method_options(self) -> PlanOptions:
        """The method's options, its model loaded on the first call (in seconds)."""
        if self._options is None:
            model = self._planner.load_model(self.model)
            self._options = PlanOptions(
                self.seed,
                model,
                self.samples,
                self.split,
                self.time_budget,
                topology=planner_links(self.topology, self.hardware),
                hardware=self.hardware,
            )
        return self._options

    def candidate_plans(self, module, sharders=None, k: int = 4) -> list[tuple[str, object]]:
        """At most `k` distinct plans worth measuring on the user's model (`tune`), each
        `(name, ShardingPlan)`: the reference first (TorchRec's own plan, else the best
        whole-table heuristic by the method's model), then, taken in turn, the reference with
        more of its smallest tables data-parallel (`more_replicas`) and the rest: themselves
        taken in turn, plans on the reference's layout (its replicas and splits kept, the other
        tables placed again by the method and the heuristics: `on_layout`) and the method's own
        candidates, its plan first (`BasePlanner.candidates`), followed by the whole-table
        heuristics, cheapest predicted first; the method's alone where neither reference is a
        legal plan of the task. Names are distinct (`distinct_name`: a repeated one
        numbered)."""
        sharders = sharders or default_sharders()
        tables = self.tables(module)
        task = self.task(module, sharders, tables)
        options = self.method_options()
        found, why = torchrec_reference(self, module, sharders, task, tables, self.budget(task))

        def predict(p):
            return self._planner.predict(task, p, options) or 0.0

        reference = found or heuristic_reference(task, predict, why)

        def entry(placement):
            return (placement.candidate or self.method, placement, None)

        own = [*self._planner.candidates(task, options, k), *whole_heuristics(task, predict)]
        first, replicas, layout = [], [], []
        if reference is not None:
            first = [(reference.name, reference.placement, reference.sharding_plan)]
            replicas = more_replicas(task, reference)
            layout = on_layout(task, reference, lambda t: self._planner.place(t, options), predict)
        later = interleaved(replicas, interleaved(layout, own))
        plans, seen, taken = [], set(), set()
        for name, placement, made in [*first, *map(entry, later)]:
            key = plan_key(task, placement)
            if len(plans) < k and key not in seen:
                seen.add(key)
                name = distinct_name(name, taken)
                taken.add(name)
                plans.append((name, placement, made))
        return [
            (name, made or self.sharding_plan(module, sharders, task, placement, tables))
            for name, placement, made in plans
        ]

    def rule_calibration(self) -> Calibration:
        """The rule's calibration, read once (`calibration`: given, a file, or the shipped)."""
        if not isinstance(self.calibration, Calibration):
            self.calibration = load_calibration(self.calibration or CALIBRATION_FILE)
        return self.calibration

    def tune(self, model, sharders, pg, batches, step_fn, **options):
        """The best of the top candidate plans measured on the user's own model, batches and
        step (`integrations.tune.tune`, whose docstring gives the options)."""
        from dreamshard.integrations.tune import tune

        return tune(self, model, sharders, pg, batches, step_fn, **options)

    def weigh_reference(self, task, placement, found: Reference | None, why: str, options):
        """The reference rule on the method's placement and the reference (TorchRec's, else
        the best heuristic): the reference where it is kept, else None."""

        def predict(p):
            return self._planner.predict(task, p, options)

        ours = predict(placement)
        if ours is None:
            self.reference_note = f"{self.method} has no cost model: its plan, unweighed"
            logging.getLogger("dreamshard").info("DreamShardPlanner: %s", self.reference_note)
            return None
        reference = found or heuristic_reference(task, predict, why)
        if reference is None:
            self.reference_note = f"{why}; no whole-table heuristic is legal here: its plan"
            logging.getLogger("dreamshard").info("DreamShardPlanner: %s", self.reference_note)
            return None
        self.reference_note = reference.note
        self.verdict = weigh_plan(reference, placement, ours, predict, self.rule_calibration())
        logging.getLogger("dreamshard").info(
            "DreamShardPlanner: %s; %s", reference.note, self.verdict.reason
        )
        return reference if self.verdict.kept_reference else None

    def sharding_plan(self, module, sharders: list, task, placement, tables: list[ModelTable]):
        """The placement as one module plan per collection, on the topology's devices."""
        topology = self.topology
        data = torchrec_plan_dict(
            task, placement, "", topology.local_world_size, topology.compute_device
        )
        entries = data["plan"][""]
        modules: dict[str, dict] = {}
        device = topology.compute_device
        for t in tables:
            sharder = sharder_for(module.get_submodule(t.module_path), sharders)
            entry = (
                entries[t.table.name]
                if sharder is None
                else offered_entry(entries[t.table.name], sharder, device)
            )
            modules.setdefault(t.module_path, {})[t.config_name] = entry
        for path, module_plan in modules.items():
            check_sharder(module.get_submodule(path), path, module_plan, sharders, self.topology)
        data["plan"] = modules
        return sharding_plan_from_dict(data)

    def collective_plan(self, module, sharders=None, pg=None):
        """Plan on rank 0 and broadcast the plan, or rank 0's error, to every rank."""
        if pg is None:
            if not dist.is_initialized():
                raise DreamshardError(
                    "collective_plan needs torch.distributed initialised (or pass pg); "
                    "use plan() in a single process"
                )
            pg = dist.GroupMember.WORLD
        if pg.size() != self.topology.world_size:
            raise DreamshardError(
                f"the process group has {pg.size()} ranks but the topology "
                f"{self.topology.world_size} devices"
            )
        return on_rank_zero(pg, lambda: self.plan(module, sharders))


def sharder_for(collection, sharders: list):
    """The first sharder that takes `collection` (as DistributedModelParallel picks), or None."""
    return next((s for s in sharders if isinstance(collection, s.module_type)), None)


# the sharding types our placements map to (TorchRec's names)
OUR_TYPES = ("table_wise", "column_wise", "row_wise", "data_parallel", "table_row_wise")
KERNELS = ("fused", "dense")  # the kernels the export writes, the one it prefers first


def offered_types(sharder, device: str) -> tuple[str, ...]:
    """The sharding types of ours that `sharder` offers on `device` with some kernel."""
    offered = set(sharder.sharding_types(device))
    return tuple(t for t in OUR_TYPES if t in offered and sharder.compute_kernels(t, device))


def offered_constraints(module, sharders: list, tables: list[ModelTable], device: str):
    """`Constraints.offered` for the tables whose collection's sharder does not offer every
    sharding type of ours on `device` (None when every sharder does): the planner plans within
    what each sharder offers, as TorchRec's planner does."""
    offered = []
    for t in tables:
        sharder = sharder_for(module.get_submodule(t.module_path), sharders)
        if sharder is None:  # `check_sharder` says so once the plan is made
            continue
        types = offered_types(sharder, device)
        if len(types) < len(OUR_TYPES):
            offered.append((t.table.name, types))
    return Constraints(offered=tuple(offered)) if offered else None


def offered_entry(entry: dict, sharder, device: str) -> dict:
    """A table's exported entry in what `sharder` offers on `device`: a whole table column-wise
    (one shard, the same offsets and sizes) where table_wise is not offered, and the first of
    the sharder's kernels for the type among fused and dense (else its first) where the
    entry's is not offered. Anything else stays; `check_sharder` refuses what is still off."""
    kind = entry["sharding_type"]
    offered = sharder.sharding_types(device)
    if kind == "table_wise" and kind not in offered and "column_wise" in offered:
        kind = "column_wise"
    kernels = sharder.compute_kernels(kind, device) if kind in offered else []
    kernel = entry["compute_kernel"]
    if kernels and kernel not in kernels:
        kernel = next((k for k in KERNELS if k in kernels), kernels[0])
    return {**entry, "sharding_type": kind, "compute_kernel": kernel}


def check_sharder(collection, path: str, module_plan: dict, sharders: list, topology) -> None:
    """DreamshardError unless a sharder takes the collection with the plan's sharding types and
    kernels on the topology's device (DistributedModelParallel would fail later, less clearly)."""
    sharder = sharder_for(collection, sharders)
    where = (
        f"the EmbeddingBagCollection at {path!r}" if path else "the model's EmbeddingBagCollection"
    )
    if sharder is None:
        raise DreamshardError(
            f"no sharder for {where}: pass EmbeddingBagCollectionSharder() among the sharders"
        )
    device = topology.compute_device
    for name, entry in module_plan.items():
        kind, kernel = entry["sharding_type"], entry["compute_kernel"]
        if kind not in sharder.sharding_types(device) or kernel not in sharder.compute_kernels(
            kind, device
        ):
            raise DreamshardError(
                f"table {name}: {type(sharder).__name__} offers no {kind} sharding with the "
                f"{kernel} kernel on {device}"
            )


def fused_optimizer(module, sharders: list) -> str:
    """Whose state the sharders' fused optimizer keeps (FUSED_OPTIMIZERS); "sgd" when they
    name none. DreamshardError for one we do not count, asking for `optimizer=`."""
    kinds = set()
    for _, collection in embedding_bag_collections(module):
        for sharder in sharders:
            if isinstance(collection, sharder.module_type):
                kind = (getattr(sharder, "fused_params", None) or {}).get("optimizer", "sgd")
                kinds.add(str(getattr(kind, "value", kind)).lower())
                break
    unknown = sorted(kinds - set(FUSED_OPTIMIZERS))
    if unknown:
        raise DreamshardError(
            f"the sharders' fused optimizer {unknown[0]} keeps state not counted here; pass "
            f"optimizer= one of {', '.join(sorted(set(FUSED_OPTIMIZERS.values())))}"
        )
    states = {FUSED_OPTIMIZERS[k] for k in kinds} or {"sgd"}
    order = ["sgd", "rowwise_adagrad", "adagrad", "adam"]  # the most state wins
    return max(states, key=order.index)


def links_of(topology) -> str | None:
    """Our topology (a `costs.comm` name) for TorchRec's `Topology` when it spans hosts: its
    local world size and its intra- and inter-host bandwidths (bytes/ms in TorchRec), no
    latency (TorchRec models none). None on one host."""
    if topology.world_size <= topology.local_world_size:
        return None
    bandwidths = topology.comms_bandwidths
    gbps = [bw * 1000 / 1e9 for bw in (bandwidths.intra_host_bw, bandwidths.inter_host_bw)]
    return f"per-host={topology.local_world_size},intra={gbps[0]:.6g},inter={gbps[1]:.6g}"


def planner_hardware(hardware):
    """The hardware file `DreamShardPlanner` plans for: as given, else this host's (one log
    line saying which)."""
    if hardware is not None:
        return load_hardware(hardware)
    found, said = detect_hardware()
    logging.getLogger("dreamshard").log(
        logging.WARNING if found.name == GENERIC_GPU else logging.INFO, "DreamShardPlanner %s", said
    )
    return found


def planner_links(topology, hardware) -> str | None:
    """Our topology for a TorchRec `Topology` under a hardware file. cpu: `links_of` (the
    topology's hosts where it spans several, else the method's own). A GPU file: its links,
    on the topology's hosts (its local world size), with the topology's bandwidths where they
    are not TorchRec's defaults (the user set them)."""
    from torchrec.distributed.planner.constants import CROSS_NODE_BANDWIDTH, INTRA_NODE_BANDWIDTH

    if not hardware.is_gpu:
        return links_of(topology)
    bandwidths = topology.comms_bandwidths
    intra, inter = bandwidths.intra_host_bw, bandwidths.inter_host_bw
    per_host = min(topology.local_world_size, topology.world_size)
    values = {
        "per-host": per_host,
        "intra": intra * 1000 / 1e9
        if intra != INTRA_NODE_BANDWIDTH
        else hardware.value("intra_gbps"),
        "inter": inter * 1000 / 1e9
        if inter != CROSS_NODE_BANDWIDTH
        else hardware.value("inter_gbps"),
        "latency": hardware.value("intra_latency_ms"),
        "network-latency": hardware.value("inter_latency_ms"),
    }
    return ",".join(f"{k}={v:.6g}" for k, v in values.items())


def default_topology():
    """TorchRec's own default: the process group's world, cuda when present, else cpu."""
    import torch
    from torchrec.distributed.planner import Topology

    if not dist.is_initialized():
        raise DreamshardError(
            "DreamShardPlanner needs a Topology (world size, device, memory) when "
            "torch.distributed is not initialised"
        )
    with quiet_torchrec():
        return Topology(
            world_size=dist.get_world_size(),
            compute_device="cuda" if torch.cuda.is_available() else "cpu",
        )


def default_reservation():
    """TorchRec's planner's default: 15% of HBM, input batches, dense parameters."""
    from torchrec.distributed.planner.storage_reservations import (
        HeuristicalStorageReservation,
    )

    with quiet_torchrec():  # its FutureWarning: it may over-count dense tensors in a dry run
        return HeuristicalStorageReservation(percentage=0.15)


def default_sharders() -> list:
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

    return [EmbeddingBagCollectionSharder()]


def as_constraints(constraints, tables: list[ModelTable]) -> Constraints | None:
    """dreamshard's `Constraints` as given (the tables' names as `model_tables` gives them), or
    TorchRec's `{table: ParameterConstraints}` (keyed by the tables' config names, so a key
    reaches that table in every collection) in our terms: one sharding type is `--sharding`
    of it (table_wise: kept whole); several that include table_wise keep the table whole
    (whole is always among them; all we could choose is no constraint); several without
    table_wise shard it as the first that maps. Other fields (kernels, pooling factors) do not
    constrain where tables go and are not read here."""
    if constraints is None or isinstance(constraints, Constraints):
        return constraints
    ours = {"table_wise", *SHARDING_KINDS}
    whole, sharding = [], []
    for key, given in constraints.items():
        types = [t for t in (getattr(given, "sharding_types", None) or []) if t in ours]
        names = [t.table.name for t in tables if t.config_name == key]
        if not types or set(types) == ours:
            continue
        if "table_wise" in types:
            whole += names
        else:
            sharding += [(name, types[0], 0) for name in names]
    found = Constraints(no_split=tuple(whole), sharding=tuple(sharding))
    return found if found else None


def pooling_constraints(tables: list[ModelTable]) -> dict:
    """TorchRec's ParameterConstraints carrying our pooling factors, so that its reservation
    counts the input batches of these statistics."""
    from torchrec.distributed.planner import ParameterConstraints

    return {
        t.config_name: ParameterConstraints(pooling_factors=list(t.feature_pooling)) for t in tables
    }


def _is_kjt(batches) -> bool:
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    return isinstance(batches, KeyedJaggedTensor)


def _batch_size(batches) -> int | None:
    if batches is None:
        return None
    return max(b.stride() for b in ([batches] if _is_kjt(batches) else batches))

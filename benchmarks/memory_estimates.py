"""Memory the way TorchRec counts it, beside ours, for the same tables and optimizers.

Run: .venv/bin/python benchmarks/memory_estimates.py [--suites dlrm-50x4,cpu-50x4]

For the first held-out task of each suite, every table is asked of TorchRec's storage estimator
(`EmbeddingEnumerator`, table-wise, fused kernel, the optimizer applied to the collection with
`apply_optimizer_in_backward`, as a TorchRec user fuses it) and of ours (`PlacementTask
.bytes_of`: weights at the task's precision plus the optimizer's state in fp32, fbgemm's
default). TorchRec's figure also holds each table's input ids and pooled outputs for its batch;
the table shows that part apart (its estimate under plain SGD less the weights). Writes
benchmarks/results/memory_estimates.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.script_entry import run_script
from dreamshard.files import write_text_atomic
from dreamshard.integrations.torchrec_planner import quiet_torchrec, torchrec_request
from dreamshard.placement.suites import make_suite
from dreamshard.placement.tasks import PlacementTask
from dreamshard.report import format_bytes, format_table

RESULTS = Path(__file__).parent / "results" / "memory_estimates.md"
OPTIMIZERS = ("sgd", "rowwise_adagrad", "adam")


def torchrec_storage(task: PlacementTask, optimizer: str) -> dict[str, int]:
    """TorchRec's HBM estimate of each table placed whole, with `optimizer` fused in."""
    import torch
    import torchrec.optim as trec_optim
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    classes = {
        "sgd": torch.optim.SGD,
        "rowwise_adagrad": trec_optim.RowWiseAdagrad,
        "adam": torch.optim.Adam,
    }
    request = torchrec_request(task, reserve=False)
    with quiet_torchrec():
        apply_optimizer_in_backward(classes[optimizer], request.module.parameters(), {"lr": 0.1})
        enumerator = EmbeddingEnumerator(request.topology, request.batch_size, request.constraints)
        options = enumerator.enumerate(request.module, [EmbeddingBagCollectionSharder()])
    return {o.name: int(o.total_storage.hbm) for o in options}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default="dlrm-50x4,cpu-50x4")
    args = parser.parse_args()
    started = time.perf_counter()
    sections = []
    for suite_name in args.suites.split(","):
        base = make_suite(suite_name).test_tasks[0]
        weights = {t.name: t.bytes(base.precision) for t in base.tables}
        io = {n: b - weights[n] for n, b in torchrec_storage(base, "sgd").items()}
        rows = []
        for optimizer in OPTIMIZERS:
            task = PlacementTask(
                base.tables,
                base.num_devices,
                base.memory_cap_bytes,
                base.precision,
                base.name,
                optimizer,
            )
            ours = {t.name: task.bytes_of(t) for t in task.tables}
            theirs = torchrec_storage(task, optimizer)
            state_theirs = {n: theirs[n] - weights[n] - io[n] for n in ours}
            ratios = [ours[n] / (theirs[n] - io[n]) for n in ours]
            rows.append(
                [
                    optimizer,
                    format_bytes(sum(weights.values())),
                    format_bytes(sum(ours.values()) - sum(weights.values())),
                    format_bytes(sum(state_theirs.values())),
                    format_bytes(sum(io.values())),
                    format_bytes(sum(ours.values())),
                    format_bytes(sum(theirs.values())),
                    f"{min(ratios):.2f}-{max(ratios):.2f}",
                ]
            )
        header = (
            "optimizer | weights | state (ours, fp32) | state (TorchRec) | "
            "inputs+outputs (TorchRec) | ours in all | TorchRec in all | "
            "ours / TorchRec's weights+state, per table"
        ).split(" | ")
        sections.append(
            f"### {base.name}: {len(base.tables)} tables, {base.precision}, TorchRec batch "
            f"{torchrec_request(base, reserve=False).batch_size} per rank on "
            f"{base.num_devices} devices\n\n```\n{format_table(header, rows)}\n```"
        )
    text = "\n\n".join(
        [
            f"# Memory estimates: ours beside TorchRec's ({time.strftime('%Y-%m-%d')})",
            "Made by `benchmarks/memory_estimates.py` in "
            f"{time.perf_counter() - started:.0f} s (no kernels run: both are estimates). "
            "Sums over each task's tables placed whole. Ours counts weights and the optimizer's "
            "state in fp32 (fbgemm's default for its fused optimizers); TorchRec counts the "
            "state at the weights' precision (its `_get_optimizer_multipler`: SGD 0, "
            "row-wise Adagrad 1/dim, Adam 2) plus each table's input ids and pooled outputs. "
            "Its planner also keeps back 15% of each device and room for 20 input batches "
            "(`docs/torchrec.md`); the plans here leave those to `--mem-gb`.",
            *sections,
        ]
    )
    write_text_atomic(RESULTS, text + "\n")
    print(text)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    run_script(main)

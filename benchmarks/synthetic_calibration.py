"""Compare the synthetic generator's aggregate statistics with the public data set's.

Run: .venv/bin/python benchmarks/synthetic_calibration.py [--profile dlrm] [--tables 856]
Prints the data set's figures (its locality_stats.txt, docs/tables.md) beside the generator's
expected ones, per histogram bin, with the L1 distance of each histogram.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.script_entry import run_script
from dreamshard.report import format_table
from dreamshard.tables import synthetic
from dreamshard.tables.table import NUM_BINS

BIN_LABELS = ["1"] + [f"({2 ** (j - 1)},{2**j}]" for j in range(1, NUM_BINS - 1)] + [">32768"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="dlrm", choices=list(synthetic.PROFILES))
    parser.add_argument("--tables", type=int, default=856)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    found = synthetic.aggregate(args.profile, args.tables, args.seed)
    unique, access = synthetic.DATASET_UNIQUE, synthetic.DATASET_ACCESS
    rows = [
        [label, unique[j], float(found.unique[j]), access[j], float(found.access[j])]
        for j, label in enumerate(BIN_LABELS)
    ]
    batch = synthetic.PROFILES[args.profile].batch_size
    print(f"{args.tables} {args.profile} tables (seed {args.seed}), batch {batch}")
    headers = ["accesses", "unique: data set", "synthetic", "accesses: data set", "synthetic"]
    print(format_table(headers, rows))
    print(
        f"L1 distance: unique rows {np.abs(found.unique - unique).sum():.3f}, "
        f"accesses {np.abs(found.access - access).sum():.3f}"
    )
    print(
        f"mean pooling factor: data set {synthetic.DATASET_POOLING}, synthetic {found.pooling:.1f}"
    )
    print(
        f"mean accesses per unique row: data set {synthetic.DATASET_ACCESSES_PER_ROW}, "
        f"synthetic {found.accesses_per_row:.1f}"
    )


if __name__ == "__main__":
    run_script(main)

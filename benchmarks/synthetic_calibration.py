"""Compare the synthetic generator's aggregate statistics with the public data set's.

Run: .venv/bin/python benchmarks/synthetic_calibration.py [--profile dlrm] [--tables 856]
Prints the data set's figures (its locality_stats.txt, docs/tables.md) beside the generator's
expected ones, per histogram bin, with the L1 distance of each histogram.
"""

from __future__ import annotations

import argparse

import numpy as np

from dreamshard.report import format_table
from dreamshard.tables.synthetic import PROFILES, draw_table, expected_histogram
from dreamshard.tables.table import NUM_BINS

DATASET_UNIQUE = [0.473, 0.152, 0.139, 0.112, 0.072, 0.032, 0.011, 0.005, 0.002, 0.001, 0.001]
DATASET_UNIQUE += [0.0] * (NUM_BINS - len(DATASET_UNIQUE))
DATASET_ACCESS = [0.069, 0.044, 0.068, 0.101, 0.121, 0.104, 0.073, 0.058, 0.052, 0.050]
DATASET_ACCESS += [0.049, 0.048, 0.048, 0.043, 0.031, 0.023, 0.019]
BIN_LABELS = ["1"] + [f"({2 ** (j - 1)},{2**j}]" for j in range(1, NUM_BINS - 1)] + [">32768"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="dlrm", choices=list(PROFILES))
    parser.add_argument("--tables", type=int, default=856)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    profile = PROFILES[args.profile]
    unique, access, pooling = np.zeros(NUM_BINS), np.zeros(NUM_BINS), []
    for i in range(args.tables):
        draw = draw_table(profile, args.seed, i)
        lookups = profile.batch_size * draw.pooling_factor
        _, u, a = expected_histogram(draw.rows, draw.alpha, lookups)
        unique, access = unique + u, access + a
        pooling.append(draw.pooling_factor)
    per_row = access.sum() / unique.sum()
    unique, access = unique / unique.sum(), access / access.sum()
    rows = [
        [label, DATASET_UNIQUE[j], float(unique[j]), DATASET_ACCESS[j], float(access[j])]
        for j, label in enumerate(BIN_LABELS)
    ]
    print(f"{args.tables} {args.profile} tables (seed {args.seed}), batch {profile.batch_size}")
    print(
        format_table(
            ["accesses", "unique: data set", "synthetic", "accesses: data set", "synthetic"], rows
        )
    )
    print(
        f"L1 distance: unique rows {np.abs(unique - DATASET_UNIQUE).sum():.3f}, "
        f"accesses {np.abs(access - DATASET_ACCESS).sum():.3f}"
    )
    print(f"mean pooling factor: data set 15.8, synthetic {np.mean(pooling):.1f}")
    print(f"mean accesses per unique row: data set 6.9, synthetic {per_row:.1f}")


if __name__ == "__main__":
    main()

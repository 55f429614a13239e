"""The studies: each a `Study` (`study`) run by one runner (`runner`) and reported (`report`),
its results a rows file in `results/` and an MLflow run (`record`); `python -m benchmarks list`
names them.

Studies: `ood` (the default planner out of distribution, exact costs), `scale` (hundreds of
tables on 16-128 devices, two judges) and `speed` (planning time and peak memory at 856 and
10,000 tables, each planner in a process of its own). Shared parts of several studies sit in
`parts/`. The library never imports this package.
`ablation`: what each part of the default planner buys (`--backend fbgemm`: on real kernels,
its rows and report `ablation_fbgemm`'s).
`torchrec`: plans in real TorchRec training steps against TorchRec's planner.
`planners`: every planner side by side on measured cost (fbgemm), the cpu suites' test tasks.

The older scripts beside them (`python benchmarks/NAME.py`) predate the runner; each moves onto
it or is retired (issue 47).
"""

# name -> "module:attribute" of its `Study`, imported only when run
STUDIES = {
    "ood": "benchmarks.ood:STUDY",
    "scale": "benchmarks.scale:STUDY",
    "torchrec": "benchmarks.torchrec:STUDY",
    "speed": "benchmarks.speed:STUDY",
    "ablation": "benchmarks.ablation:STUDY",
    "ablation_fbgemm": "benchmarks.ablation:FBGEMM",  # `ablation --backend fbgemm`'s rows
    "planners": "benchmarks.planners:STUDY",
}

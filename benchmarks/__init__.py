"""The studies: each a `Study` (`study`) run by one runner (`runner`), its results a rows file in
`results/` and an MLflow run (`record`); `python -m benchmarks list` names them.

Studies: `ood` (the default planner out of distribution, exact costs) and `scale` (hundreds of
tables on 16-128 devices, two judges). Shared parts of several studies sit in `parts/`. The
library never imports this package.

The older scripts beside them (`python benchmarks/NAME.py`) predate the runner; each moves onto
it or is retired (issue 47).
"""

# name -> "module:attribute" of its `Study`, imported only when run
STUDIES = {
    "ood": "benchmarks.ood:STUDY",
    "scale": "benchmarks.scale:STUDY",
}

"""Where a study's results live: its rows file in git, its MLflow run, and what ties each model
to the command that remakes it.

`benchmarks/results/NAME.rows.json` holds a run's rows and how they were made (the command,
commit, host, versions, each model's content hash and command); the report beside it is
rendered from that file alone. The same run is logged to MLflow (experiment
`dreamshard-study-NAME`): parameters, each target's figure, interval and verdict as metrics,
the rows as an artifact. `python -m benchmarks import` rebuilds those runs from the rows files,
so a fresh clone's store holds every study run the repository has.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from dreamshard.costs.dataset import hardware, versions
from dreamshard.errors import DreamshardError
from dreamshard.files import read_json, write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
ROWS_LIMIT = 200_000  # bytes a study's rows may take in git
# floats kept to this many significant digits: a cost to 1e-9 of itself, half the bytes of
# a full repr, and far below any ratio a report prints (the units study checks one to 1e-6)
ROWS_DIGITS = 9
IMPORTED = "study.rows_sha256"  # the tag an imported run carries: which rows file made it


def git(*args: str) -> str:
    """`git args` in the repository, its output stripped ("" when git is not there)."""
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def commit() -> str:
    """The commit the study runs at, "+changes" when the library has uncommitted changes."""
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "dreamshard", "benchmarks/*.py")
    return head + ("+changes" if dirty else "")


def host() -> dict:
    return {"hardware": hardware(), "versions": versions()}


def file_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def model_provenance(path: str | Path, command: str) -> dict:
    """A model's record in a study: its file's content hash and the command that remakes it
    from a fresh clone. A model with no command is refused: its figures could not be rerun."""
    path = Path(path)
    if not path.is_file():
        raise DreamshardError(f"model file {path} not found")
    if not command or command == "?":
        raise DreamshardError(
            f"model {path} records no command that remakes it: give a model made by "
            "`dreamshard train` or `dreamshard pretrain` in this version, or the shipped one"
        )
    if str(path.resolve()).startswith(("/tmp/", "/var/tmp/")):
        raise DreamshardError(f"model {path} lives in a temporary folder: keep it in the project")
    return {
        "path": os.path.relpath(path.resolve(), ROOT),
        "sha256": file_hash(path),
        "command": command,
    }


def rows_path(name: str, folder: Path = RESULTS) -> Path:
    return folder / f"{name}.rows.json"


def write_rows(path: Path, meta: dict, rows: list[dict]) -> None:
    """The rows file, atomically; a DreamshardError when it would pass its size in git."""
    data = {"meta": meta, "rows": rounded(rows)}
    text = json.dumps(data, indent=None, separators=(",", ":"))
    text = text.replace('},{"task"', '},\n{"task"') + "\n"  # a task a line: diffs read
    if len(text.encode()) > ROWS_LIMIT:
        raise DreamshardError(
            f"{path.name} would be {len(text.encode()) // 1000} KB, past the {ROWS_LIMIT // 1000} "
            "KB a study's rows may take: keep per-task figures only"
        )
    write_text_atomic(path, text)


def rounded(value, digits: int = ROWS_DIGITS):
    """`value` with every float to `digits` significant digits (nested lists and dicts)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    return value


def read_rows(path: Path) -> tuple[dict, list[dict]]:
    data = read_json(path, "a study's rows file")
    if not isinstance(data, dict) or "meta" not in data or "rows" not in data:
        raise DreamshardError(f"{path} is not a study's rows file (no meta or rows)")
    return data["meta"], data["rows"]


def mlflow_metrics(verdicts: list[dict]) -> dict[str, float]:
    """Each target's figure, interval ends and verdict (1 met, 0 not), by the figure's name."""
    out = {}
    for verdict in verdicts:
        key = "".join(c if c.isalnum() or c in "_-." else "_" for c in verdict["figure"])
        out.update(
            {
                f"{key}.value": verdict["value"],
                f"{key}.low": verdict["low"],
                f"{key}.high": verdict["high"],
                f"{key}.met": float(verdict["met"]),
            }
        )
    return {k: v for k, v in out.items() if v == v}  # MLflow takes no NaN


def readable(verdicts: list[dict]) -> list[dict]:
    """The verdicts with their names as the report writes them, NaN as null (JSON)."""
    return [
        {k: (None if isinstance(v, float) and v != v else v) for k, v in verdict.items()}
        for verdict in verdicts
    ]


def log_run(meta: dict, verdicts: list[dict], rows_file: Path, report: Path | None) -> str:
    """The study run as an MLflow run in experiment `dreamshard-study-NAME`: its parameters,
    its targets' metrics, its rows (and report) as artifacts, tagged with the rows file's hash.
    Returns the run id."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow  # only here: slow to import, and only a full run logs

    from dreamshard.tracking import connect, use_experiment

    connect()
    use_experiment(f"study-{meta['study']}")  # the experiment dreamshard-study-NAME
    params = {
        "study": meta["study"],
        "command": meta["command"][:490],
        "commit": meta["commit"],
        "hardware": meta["hardware"],
        "tasks": meta["tasks"],
        "judges": json.dumps(meta["judges"])[:490],
        **{f"model.{k}.sha256": v["sha256"] for k, v in meta["models"].items()},
        **{f"model.{k}.command": v["command"][:490] for k, v in meta["models"].items()},
    }
    with mlflow.start_run(run_name=f"{meta['study']} @ {meta['commit']}") as run:
        mlflow.log_params(params)
        mlflow.log_metrics(mlflow_metrics(verdicts))
        mlflow.log_dict({"targets": readable(verdicts)}, "targets.json")  # the Evidence page's
        mlflow.set_tags({IMPORTED: file_hash(rows_file), "study.date": meta["date"]})
        mlflow.log_artifact(str(rows_file))
        if report is not None and report.is_file():
            mlflow.log_artifact(str(report))
        return run.info.run_id


def imported_hashes(study: str) -> set[str]:
    """The rows files' hashes the store's runs of `study` were made from."""
    import mlflow

    from dreamshard.tracking import connect, experiment_name

    connect()
    found = mlflow.get_experiment_by_name(experiment_name(f"study-{study}"))
    if found is None:
        return set()
    runs = mlflow.search_runs([found.experiment_id], output_format="list")
    return {run.data.tags.get(IMPORTED, "") for run in runs}


def model_option(parser) -> None:
    """A study's `--model`: the shipped model (default) or a model file a command remakes."""
    parser.add_argument(
        "--model",
        default="shipped",
        help="shipped (default: the package's pre-trained model) or a model file that "
        "`dreamshard train` made (its command is rendered from the config it records)",
    )


def studied_model(given: str):
    """The model `--model` names and its provenance (`model_provenance`): the shipped one with
    the command its manifest records, or a file with the `dreamshard train` command rendered
    from its full config (`parts.models.train_command`); refused without one."""
    from benchmarks.parts.models import train_command
    from dreamshard.learn.model_file import resolve_model
    from dreamshard.learn.shipped import SHIPPED_DIR, shipped_manifest

    model = resolve_model(given)
    if given == "shipped":
        return model, model_provenance(SHIPPED_DIR / "model.pt", shipped_manifest()["command"])
    return model, model_provenance(given, train_command(model))

"""Starting a program under torchrun (one process per device) and reading back its result.

Every multi-process measurement goes through `run_job`: the job is written as JSON, torchrun
starts `nprocs` ranks of the program in a process group of its own, and the group is stopped by
its id when the time runs out (no rank outlives its caller). A failure comes back as one line,
the first exception any rank named.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from dreamshard.errors import DreamshardError

# The children may import the flows' stack (Prefect, MLflow); they never phone home.
QUIET_ENV = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}


class TorchrunError(DreamshardError):
    """A torchrun program failed, timed out or wrote no result; `stderr` keeps its output."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr


def torchrun(
    program: list[str],
    nprocs: int,
    *,
    timeout_s: float = 3600.0,
    threads: int | None = None,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run `python -m torch.distributed.run --nproc_per_node N <program>` on this host.

    `program` is what follows torchrun's own options: `["-m", "gpu_tasks.x", "--job", path]` or
    `[script.py, ...]`. `threads` sets OMP_NUM_THREADS for every rank. Returns the finished
    process (stdout and stderr captured); raises TorchrunError on a non-zero exit or a timeout,
    after stopping the whole process group.
    """
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nprocs}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        *program,
    ]
    child_env = {**os.environ, **QUIET_ENV, **(env or {})}
    if threads is not None:
        child_env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.Popen(
        command,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: stopped as one by pid below
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        raise TorchrunError(
            f"torchrun ({' '.join(program[:2])}) ran past {timeout_s:.0f} s and was stopped"
        ) from None
    except BaseException:  # KeyboardInterrupt included: leave no rank behind
        _stop_group(proc)
        raise
    if proc.returncode != 0:
        raise TorchrunError(
            f"torchrun exited with {proc.returncode}: {first_error(stderr)}", stderr
        )
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def run_job(
    module: str,
    nprocs: int,
    job: dict,
    *,
    timeout_s: float = 3600.0,
    threads: int | None = None,
    env: dict | None = None,
) -> dict:
    """Run `python -m <module> --job job.json --out result.json` on `nprocs` ranks (`module`
    may also be a script's path, ending in .py, run as `python <script> ...`).

    The program reads the job, and one rank writes the result JSON, which is returned.
    """
    with tempfile.TemporaryDirectory(prefix="dreamshard-job-") as tmp:
        job_path, out_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_path.write_text(json.dumps(job))
        start = [module] if module.endswith(".py") else ["-m", module]
        program = [*start, "--job", str(job_path), "--out", str(out_path)]
        done = torchrun(program, nprocs, timeout_s=timeout_s, threads=threads, env=env)
        if not out_path.exists():
            raise TorchrunError(
                f"{module} wrote no result: {first_error(done.stderr)}", done.stderr
            )
        return json.loads(out_path.read_text())


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL what is left after 10 s."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.communicate(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue


def first_error(stderr: str) -> str:
    """The first line where a rank names its failure, else the last line.

    torchrun's own report (ChildFailedError, its `E1201 ...` log lines) only says that a rank
    failed, so it is passed over for the rank's words.
    """
    lines = [line.strip() for line in stderr.splitlines() if re.search(r"[A-Za-z]", line)]
    ranks = [x for x in lines if "ChildFailedError" not in x and not re.match(r"[EWI]\d{4} ", x)]
    named = [x for x in ranks if re.search(r"\w+(Error|Exception|Failure)\b:", x)]
    python = [x for x in ranks if re.search(r"python[\d.]*: ", x)]  # "python: No module named"
    found = named or python
    return found[0] if found else (lines[-1] if lines else "no output")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

"""One measurement at a time per host: the file lock that every run of timed kernels holds.

Two processes timing kernels on one host at once distort each other's timings, so the fbgemm
backend times only while it holds this host's lock, and the collector checks the dataset again
under it. The lock file sits in the temp folder (`/tmp/dreamshard-measure-HOST.lock`), not in
the state folder: two projects or state folders on one host share its CPU and GPU all the same.
`$DREAMSHARD_MEASURE_LOCK` names another file (e.g. one every user of a shared host can write).
The holder writes its pid and command into the file, so that a waiter can say whom it waits for.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import cache
from pathlib import Path

from filelock import FileLock, Timeout

from dreamshard.costs.types import CostBackend
from dreamshard.errors import DreamshardError

LOCK_ENV = "DREAMSHARD_MEASURE_LOCK"
HOST_BACKENDS = ("fbgemm", "dmp")  # backends that time real kernels; `simulated` times nothing


def host_name() -> str:
    """This host's name, safe in a file name and a Prefect concurrency limit's name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def lock_path() -> Path:
    """`$DREAMSHARD_MEASURE_LOCK`, else `dreamshard-measure-HOST.lock` in the temp folder."""
    named = os.environ.get(LOCK_ENV)
    if named:
        return Path(named).resolve()
    return Path(tempfile.gettempdir()) / f"dreamshard-measure-{host_name()}.lock"


def occupies_host(backend: CostBackend | str) -> bool:
    """Whether measuring with this backend (or backend name) times kernels on this host."""
    name = backend if isinstance(backend, str) else backend.name
    return name in HOST_BACKENDS


def _write_holder(fd: int) -> None:
    """Record who holds the lock, in the lock file itself (called on every first acquire)."""
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "python"
    record = {"pid": os.getpid(), "command": command[:160], "since": time.strftime("%H:%M:%S")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)


def holder(path: Path) -> dict:
    """The holder's record ({pid, command, since}), or {} when the file says nothing readable."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


@cache
def _file_lock(path: str) -> FileLock:
    # One object per path in a process: it is reentrant within a thread (the collector holds it
    # around `measure`, which takes it again), and other threads wait on it like other processes.
    return FileLock(path, mode=0o666, on_acquired=_write_holder)


_announced: set[int] = set()  # holders this process has already said it waits for


@contextmanager
def host_lock() -> Iterator[None]:
    """Hold this host's measurement lock; waiting for it prints one line on stderr per holder."""
    path = lock_path()
    lock = _file_lock(str(path))
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            _announce(path)
            lock.acquire()
    except OSError as exc:
        raise DreamshardError(
            f"cannot take this host's measurement lock {path} ({exc.strerror or exc}); set "
            f"{LOCK_ENV} to a file that everyone measuring on this host can write"
        ) from None
    try:
        yield
    finally:
        lock.release()


HOLDER_WAIT = 2.0  # seconds a waiter gives a new holder to write its record before saying so


def _announce(path: Path) -> None:
    # the holder writes its record just after it takes the lock: a waiter that reads in between
    # finds the file empty, so it reads again for a moment before it calls the holder unknown
    found, until = holder(path), time.monotonic() + HOLDER_WAIT
    while not found and time.monotonic() < until:
        time.sleep(0.02)
        found = holder(path)
    pid = found.get("pid", -1)
    if pid in _announced:
        return
    _announced.add(pid)
    who = (
        f"pid {pid}: {found.get('command', '?')}, since {found.get('since', '?')}"
        if found
        else "holder unknown"
    )
    print(
        f"dreamshard: waiting: another measurement holds this host ({who}); lock {path}",
        file=sys.stderr,
        flush=True,
    )


def measurement_lock(backend: CostBackend) -> AbstractContextManager[None]:
    """The host lock for a backend that times kernels here; nothing for one that does not."""
    return host_lock() if occupies_host(backend) else nullcontext()

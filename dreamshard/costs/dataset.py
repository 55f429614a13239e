"""The cost dataset: every measurement appended to a SQLite file that pandas can read.

One row per measurement, each written in its own transaction, so killing the collector loses
at most the measurement in flight and never corrupts what is stored. A record's `key` is the
identity of what was measured (tables, devices, cap, placement, backend settings, round) and of
the machine that measured it (its `hardware`, for a backend whose costs depend on it), so a
re-run skips what is stored and never stores it twice, and measurements of one placement on two
GPU types (merged files, a mixed Dask cluster) coexist.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import asdict
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from dreamshard.costs.types import COST_TERMS, DeviceCost, PlacementCost
from dreamshard.errors import DreamshardError
from dreamshard.placement.tasks import Placement, PlacementTask, shard_view
from dreamshard.tables.sources import table_from_record, table_to_dict

COLUMNS = """
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    created TEXT NOT NULL,
    suite TEXT, task TEXT, method TEXT, round INTEGER,
    num_devices INTEGER, memory_cap_bytes INTEGER, precision TEXT,
    tables TEXT, placement TEXT, costs TEXT,
    overall REAL, spread REAL,
    backend TEXT, comm TEXT, config TEXT, hardware TEXT, versions TEXT, error TEXT,
    info TEXT
"""
# Columns added after the first datasets were written: added to an older file when it is opened.
ADDED_COLUMNS = {"info": "TEXT"}
# The keys' form (SQLite's user_version): 1 added the machine; an older file is re-keyed on open.
KEY_VERSION = 1
OPEN_RETRY_S = 60  # how long opening a file other processes are opening too is tried
# backends whose costs are the same on every machine: their keys name none
MACHINE_FREE = ("simulated",)


def measurement_key(
    task: PlacementTask, placement: Placement, config: dict, round_: int, machine: str
) -> str:
    """The key of one measurement: what was measured, with which backend settings, which
    round (`measurement_identity`), and on which `machine` (its `hardware()`; ignored for a
    backend in MACHINE_FREE)."""
    identity = measurement_identity(task, placement, config, round_)
    return _key(identity, key_machine(config, machine))


def measurement_identity(
    task: PlacementTask, placement: Placement, config: dict, round_: int
) -> dict:
    """What one measurement measured, as its record stores it (a split placement table-wise,
    over its shards), with which backend settings and which round."""
    task, placement = shard_view(task, placement)
    return {
        "tables": [table_to_dict(t) for t in task.tables],
        "num_devices": task.num_devices,
        "memory_cap_bytes": task.memory_cap_bytes,
        "precision": task.precision,
        "placement": list(placement.devices),
        "config": config,
        "round": round_,
    }


def key_machine(config: dict, machine: str) -> str:
    """The machine a key names: none for a backend whose costs no machine changes."""
    return "" if config.get("backend") in MACHINE_FREE else machine


def _key(identity: dict, machine: str | None) -> str:
    """sha256 of the identity, with the machine (None: the form before KEY_VERSION 1)."""
    if machine is not None:
        identity = {**identity, "machine": machine}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _row_identity(row: sqlite3.Row) -> dict:
    return {
        "tables": json.loads(row["tables"]),
        "num_devices": row["num_devices"],
        "memory_cap_bytes": row["memory_cap_bytes"],
        "precision": row["precision"],
        "placement": json.loads(row["placement"]),
        "config": json.loads(row["config"]),
        "round": row["round"],
    }


@cache
def hardware() -> str:
    """This machine: its first GPU's name, else its CPU's model name."""
    try:
        import torch  # only here: the dataset itself is plain sqlite

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except ImportError:
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("torch", "fbgemm-gpu-cpu", "fbgemm-gpu", "dreamshard"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            pass
    return found


class CostDataset:
    """Append-only store of measurements in a SQLite file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._set_up()
        except sqlite3.DatabaseError as exc:
            raise DreamshardError(f"cannot open cost dataset {self.path}: {exc}") from None

    def _set_up(self) -> None:
        """WAL, the table, today's columns and keys. Two processes opening one new file at once
        can meet in SQLite's lock upgrade (one switching the journal to WAL while the other
        starts a write), which SQLite answers "locked" at once rather than wait; every step is
        idempotent, so it is tried again for up to OPEN_RETRY_S."""
        deadline = time.monotonic() + OPEN_RETRY_S
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL").fetchall()
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.execute(f"CREATE TABLE IF NOT EXISTS measurements ({COLUMNS})")
                self._add_columns()
                self._rekey()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _add_columns(self) -> None:
        have = {row[1] for row in self._db.execute("PRAGMA table_info(measurements)")}
        for name, kind in ADDED_COLUMNS.items():
            if name not in have:
                try:
                    self._db.execute(f"ALTER TABLE measurements ADD COLUMN {name} {kind}")
                except sqlite3.OperationalError as exc:
                    # another process added it just now, or a read-only file: it reads as before
                    if "duplicate column" not in str(exc) and "readonly" not in str(exc):
                        raise

    def _rekey(self) -> None:
        """Bring an older file's keys to KEY_VERSION, in one transaction: each record whose key
        is the old form of its own identity gets the new one, naming the machine it records
        (an error record keeps its suffix); any other key is left as it is."""
        if self._key_version() >= KEY_VERSION:
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc):  # read as it is; nothing can be stored in it anyway
                return
            raise
        try:
            if self._key_version() < KEY_VERSION:
                for row in self._db.execute("SELECT * FROM measurements").fetchall():
                    base, _, suffix = row["key"].partition(":")
                    identity = _row_identity(row)
                    if base != _key(identity, None):
                        continue
                    machine = key_machine(identity["config"], row["hardware"] or "")
                    new = _key(identity, machine) + (f":{suffix}" if suffix else "")
                    self._db.execute(
                        "UPDATE OR IGNORE measurements SET key = ? WHERE id = ?", (new, row["id"])
                    )
                self._db.execute(f"PRAGMA user_version = {KEY_VERSION}")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _key_version(self) -> int:
        return self._db.execute("PRAGMA user_version").fetchall()[0][0]

    def close(self) -> None:
        self._db.close()

    def machines(self, backend: str) -> dict[str, int]:
        """How many successful measurements of `backend` each machine (`hardware`) made."""
        query = (
            "SELECT hardware, COUNT(*) FROM measurements WHERE status = 'ok' AND backend = ? "
            "GROUP BY hardware"
        )
        return {row[0] or "": row[1] for row in self._db.execute(query, (backend,))}

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]

    def has(self, key: str) -> bool:
        found = self._db.execute("SELECT 1 FROM measurements WHERE key = ?", (key,)).fetchone()
        return found is not None

    def append(
        self,
        key: str,
        task: PlacementTask,
        placement: Placement,
        cost: PlacementCost | None,
        config: dict,
        suite: str = "",
        round_: int = 0,
        error: str = "",
        measured_on: str = "",
    ) -> bool:
        """Store one measurement (or its error); False when the key was already stored. A split
        placement is stored table-wise, over its shards. `measured_on`: the hardware of the
        machine that measured, where that was not this one (a Dask worker)."""
        task, placement = shard_view(task, placement)
        record: dict[str, Any] = {
            "key": key,
            "status": "ok" if cost is not None else "error",
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "suite": suite,
            "task": task.name,
            "method": placement.method,
            "round": round_,
            "num_devices": task.num_devices,
            "memory_cap_bytes": task.memory_cap_bytes,
            "precision": task.precision,
            "tables": json.dumps([table_to_dict(t) for t in task.tables]),
            "placement": json.dumps(list(placement.devices)),
            "config": json.dumps(config, sort_keys=True),
            "backend": config.get("backend", ""),
            "hardware": measured_on or hardware(),
            "versions": json.dumps(versions()),
            "error": error,
        }
        if cost is not None:
            record["costs"] = json.dumps([asdict(d) for d in cost.devices])
            record["overall"] = cost.overall
            record["spread"] = cost.spread
            record["comm"] = cost.comm
            record["info"] = json.dumps(cost.info, sort_keys=True, default=str)
        names = ", ".join(record)
        marks = ", ".join("?" for _ in record)
        cursor = self._db.execute(
            f"INSERT OR IGNORE INTO measurements ({names}) VALUES ({marks})", list(record.values())
        )
        return cursor.rowcount == 1

    def merge_from(self, source: str | Path) -> int:
        """Copy every measurement of another cost dataset that this one does not hold (by key),
        in one transaction, in the source's order; returns how many were added. An older source
        is re-keyed in place first (as any open does)."""
        source = Path(source)
        if not source.is_file():
            raise DreamshardError(f"no cost dataset at {source}")
        if source.resolve() == self.path.resolve():
            raise DreamshardError(f"{source} is the dataset being merged into")
        opened = CostDataset(source)  # a readable dataset, with today's columns and keys
        try:
            if opened._key_version() < KEY_VERSION:
                raise DreamshardError(
                    f"{source} holds keys of an older form and could not be re-keyed (is it "
                    "read-only?); copy it somewhere writable and merge the copy"
                )
        finally:
            opened.close()
        columns = ", ".join(
            row[1] for row in self._db.execute("PRAGMA table_info(measurements)") if row[1] != "id"
        )
        before = len(self)
        self._db.execute("ATTACH DATABASE ? AS source", (str(source),))
        try:
            self._db.execute(
                f"INSERT OR IGNORE INTO measurements ({columns}) "
                f"SELECT {columns} FROM source.measurements ORDER BY id"
            )
        except sqlite3.DatabaseError as exc:
            raise DreamshardError(f"cannot merge {source}: {exc}") from None
        finally:
            self._db.execute("DETACH DATABASE source")
        return len(self) - before

    def stored_cost(self, key: str) -> PlacementCost | None:
        """The cost stored under `key` (with its info), or None when it was never measured
        successfully."""
        row = self._db.execute(
            "SELECT costs, backend, comm, info FROM measurements WHERE key = ? AND status = 'ok'",
            (key,),
        ).fetchone()
        if row is None:
            return None
        devices = tuple(DeviceCost(**d) for d in json.loads(row["costs"]))
        info = json.loads(row["info"]) if row["info"] else {}
        return PlacementCost(devices, row["backend"], row["comm"], info)

    def rows(
        self, status: str = "ok", backend: str | None = None, machines: Iterable[str] = ()
    ) -> list[sqlite3.Row]:
        """The records of `status`, oldest first; of `backend` and measured on one of
        `machines`, when given."""
        query = "SELECT * FROM measurements WHERE status = ?"
        params: list[Any] = [status]
        if backend:
            query += " AND backend = ?"
            params.append(backend)
        machines = sorted(set(machines))
        if machines:
            query += f" AND hardware IN ({', '.join('?' for _ in machines)})"
            params.extend(machines)
        return self._db.execute(query + " ORDER BY id", params).fetchall()

    def to_frame(self):
        """All records as a pandas DataFrame."""
        import pandas as pd  # pandas takes a second to import; only this reader needs it

        return pd.read_sql_query("SELECT * FROM measurements ORDER BY id", self._db)


def record_task(row: sqlite3.Row) -> tuple[PlacementTask, Placement]:
    """The task and placement a stored record measured."""
    tables = tuple(table_from_record(r, "dataset record") for r in json.loads(row["tables"]))
    task = PlacementTask(
        tables, row["num_devices"], row["memory_cap_bytes"], row["precision"], row["task"]
    )
    return task, Placement(tuple(json.loads(row["placement"])), row["method"])


def record_costs(row: sqlite3.Row) -> list[dict[str, float]]:
    """Per-device cost terms of a stored record."""
    return [{k: d[k] for k in (*COST_TERMS, "cv")} for d in json.loads(row["costs"])]

"""The scale study's tasks (`benchmarks/scale.py`; the paper's RQ5): hundreds of tables on
16-128 devices across hosts.

Tasks (`study_task`): three table sets (`STUDY_SETS`): the test half of the `dlrm` pool (428
tables), the whole pool (856: it then holds the tables the dlrm suites train on), and 856 tables
of the `wide` family (`tables.synthetic`: rows 1e3-5e7, dims 8-256, pooling 1-200); each on a
device count, at fp16, under one of two memory settings: `loose` (`suites.capped_task`: whole-
table plans exist) or `binding` (1.2x the even share: a table larger than a device must split).
The devices sit on hosts of 8 (`TOPOLOGY`, nvlink inside a host, 400 Gb/s RDMA between).

The reference heuristics place the memory-forced splits only (`memory_split_place`: whole
tables where memory allows), as the study's targets name them.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.study import Arm
from dreamshard.cli.args import number_list
from dreamshard.errors import DreamshardError
from dreamshard.placement.heuristics import HEURISTIC_KEYS, greedy_place
from dreamshard.placement.splitting import memory_splits, split_place
from dreamshard.placement.suites import capped_task, parse_suite_name, split_pool
from dreamshard.placement.tasks import Placement, PlacementTask
from dreamshard.tables.synthetic import generate_tables

STUDY_SETS = ("dlrm-428", "dlrm-856", "wide-856")
MEMORY_SETTINGS = ("loose", "binding")
BINDING_SLACK = 1.2  # the binding setting's cap over the even share
TOPOLOGY = "nvlink-rdma"  # hosts of 8
# the heuristics on the memory-forced splits, as the studies name them: their per-task best is
# the reference the scale, units and envelope studies' ratios are over
REFERENCE = tuple(f"{key} (memory splits)" for key in HEURISTIC_KEYS)


def study_tables(table_set: str, seed: int) -> list:
    """The tables of `table_set` for seed `seed` (the dlrm sets: pool seed)."""
    if table_set == "wide-856":
        return generate_tables("wide", 856, seed)
    spec = replace(parse_suite_name("dlrm-50x4"), pool_seed=seed)  # only its pool matters
    train, test = split_pool(spec)
    if table_set == "dlrm-428":
        return test
    if table_set == "dlrm-856":
        return train + test
    raise DreamshardError(f"unknown table set {table_set!r}; choose one of {', '.join(STUDY_SETS)}")


def study_task(table_set: str, seed: int, devices: int, memory: str) -> PlacementTask:
    """One task of the study: a table set's seed on `devices` devices under `memory`."""
    tables = study_tables(table_set, seed)
    name = f"{table_set}x{devices}/{memory}/seed {seed}"
    if memory == "loose":
        return capped_task(tables, devices, name)
    if memory != "binding":
        raise DreamshardError(f"unknown memory setting {memory!r}; choose loose or binding")
    even = sum(t.bytes() for t in tables) / devices
    return PlacementTask(tuple(tables), devices, int(BINDING_SLACK * even), name=name)


def memory_split_place(task: PlacementTask, key: str) -> Placement:
    """Heuristic `key` on the task's memory-forced splits only (whole tables where they fit)."""
    return split_place(task, memory_splits(task), lambda shards: greedy_place(shards, key), key)


def grid_tasks(sets: str, devices: str, memory: str, seeds: str) -> list[PlacementTask]:
    """`study_task` of every table set, device count and memory setting (comma lists) and seed
    (as 0-3 or 0,2), in that order of loops."""
    return [
        study_task(table_set, seed, int(count), setting)
        for table_set in sets.split(",")
        for count in devices.split(",")
        for setting in memory.split(",")
        for seed in number_list(seeds, "--seeds")
    ]


def reference_arms() -> list[Arm]:
    """The four heuristics on the memory-forced splits, named as `REFERENCE`."""
    return [
        Arm(name, lambda t, k=key: memory_split_place(t, k))
        for name, key in zip(REFERENCE, HEURISTIC_KEYS)
    ]

"""`tune`: a planner's few best plans measured on the user's own model, batches and training step
under DistributedModelParallel, on every rank of the process group; the reference plan (TorchRec's,
else the best whole-table heuristic) stays unless the best of the others is cheaper beyond the
noise in rounds of its own.

    result = planner.tune(model, sharders, pg, batches, step_fn)
    model = DistributedModelParallel(model, device=device, plan=result.plan, sharders=sharders)

Screening: each candidate is built as `DistributedModelParallel(copy.deepcopy(model), ...)`;
the user's model and weights are never touched. A round takes the candidates in a fresh order,
the same on every rank (a seeded RNG): each candidate's `warmup` untimed calls of
`step_fn(sharded_copy, batch)`, then one timed call of each candidate in turn, `steps` times (a
slow moment of the host falls on every candidate alike), cycling through `batches`, each step
started from a barrier. A candidate's cost in a round is the slowest rank's median step. The
screening has half of `seconds`. Confirming: the cheapest of several noisy ratios is biased low
(a winner's curse), so the screening's cheapest (the finalist, where it measured cheaper than
the reference) and the reference are built again, in fresh copies, and measured in new rounds
for the rest of `seconds` (at least 3); the choice is `refine.choose` on those [rounds, 2]
costs alone, column 0 the reference. `step_fn` is the user's whole training step (forward,
backward, optimizer) and gets the sharded copy: it must not close over the user's model.

Cost: k candidates x screening rounds x (warmup + steps) training steps, then 2 x confirming
rounds x (warmup + steps), plus the candidate plans on rank 0 and a copy and DMP build per
candidate and two more; the screening's sharded copies live until it ends, so the devices hold
k copies of the tables. Measured here (`tests/test_tune.py`'s tune: 2 gloo ranks on a 2-core CPU
shared with another 2-rank job, 6 tables of at most 2,000 rows, 4 candidates of which 2 fail, 3
rounds of 1 + 3 steps a stage): 4.7 to 7.3 s from the call to the result, tracking to a fresh
sqlite store included. On GPUs (not measured) it scales with the user's step time: the defaults
screen 4 x (3 + 10) steps a round for 30 s and confirm 2 x (3 + 10) a round for the rest, so a
100 ms step tunes in about 60 s of steps and a 1 s step in about 234 s (3 rounds a stage),
builds on top.

Failures: a candidate that raises on any rank while built or in a round is dropped on every rank
(all ranks exchange their errors after each build and round) with one line on rank 0; the
reference failing ends the tune with one DreamshardError line, and so does a collective that
raises (a rank died). A step that raises on one rank while the others wait inside a collective
of theirs cannot be recovered here: those ranks wait until the process group's timeout.
"""

from __future__ import annotations

import copy
import gc
import logging
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from dreamshard.errors import DreamshardError
from dreamshard.evaluation.refine import choose
from dreamshard.integrations.rank_zero import on_rank_zero
from dreamshard.integrations.torchrec_tables import embedding_bag_collections
from dreamshard.progress import Progress
from dreamshard.report import format_table

TUNE_SECONDS = 60.0  # no round starts that would end past this (after the builds)
# of the seconds, for screening every candidate; the rest confirms the best against the
# reference in fresh copies and rounds (the screening's best is biased low: a winner's curse)
SCREEN_SHARE = 0.5
CANDIDATES = 4  # the reference and the next three of `candidate_plans`
WARMUP, STEPS = 3, 10  # untimed, then timed steps of a candidate in a round
MIN_ROUNDS, ROUNDS = 3, 10  # fewer than 3 could not tell a real difference from a lucky round


@dataclass(frozen=True)
class Tune:
    """What was measured and which plan won; `plan` is the answer, the same on every rank."""

    plan: object  # the winner's ShardingPlan
    name: str
    ratio: float  # the winner's geometric-mean paired ratio to the reference's step
    interval: tuple[float, float]  # its 95% bootstrap interval
    names: tuple[str, ...]  # the candidates measured to the end, [0] the reference
    costs_ms: tuple[tuple[float, ...], ...]  # [round][candidate]: the slowest rank's median step
    ratios: tuple[float, ...]
    intervals: tuple[tuple[float, float], ...]
    skipped: tuple[tuple[str, str], ...]  # (candidate, the error's first line)
    reason: str
    seconds: float
    finalist: str | None = None  # the screening's best, measured again beside the reference
    confirm_ms: tuple[tuple[float, ...], ...] = ()  # [round][reference, finalist]
    confirmation: tuple[float, float, float] | None = None  # the finalist's ratio, its interval

    @property
    def rounds(self) -> int:
        return len(self.costs_ms)

    def summary(self) -> str:
        """The candidates as a table, and the verdict, for the terminal."""
        header = ["candidate", "median ms", "vs reference", "95% interval", ""]
        medians = np.median(np.array(self.costs_ms), axis=0)
        rows = [
            [
                name,
                float(medians[j]),
                f"{self.ratios[j]:.3f}x",
                f"{self.intervals[j][0]:.3f}-{self.intervals[j][1]:.3f}",
                "reference" if j == 0 else ("won" if name == self.name else ""),
            ]
            for j, name in enumerate(self.names)
        ]
        lines = [
            f"tuned {len(rows)} candidates in {self.rounds} interleaved rounds of the user's "
            f"step ({self.seconds:.1f} s)",
            format_table(header, rows),
        ]
        lines += [f"skipped {name}: {error}" for name, error in self.skipped]
        if self.confirmation:
            ratio, low, high = self.confirmation
            lines.append(
                f"confirming: {self.finalist} measured again beside the reference in "
                f"{len(self.confirm_ms)} rounds of fresh copies: {ratio:.3f}x, 95% "
                f"interval {low:.3f}-{high:.3f}"
            )
        return "\n".join([*lines, f"tuned: {self.reason}"])


def tune(
    planner,
    model,
    sharders,
    pg,
    batches,
    step_fn,
    steps: int = STEPS,
    candidates: int = CANDIDATES,
    warmup: int = WARMUP,
    rounds: int = ROUNDS,
    seconds: float = TUNE_SECONDS,
    seed: int = 0,
    device: torch.device | None = None,
    tracking: str | bool | None = None,
) -> Tune:
    """The cheapest of `planner.candidate_plans(model, sharders, candidates)` in `model`'s own
    training steps on the ranks of `pg` (see the module's docstring). `batches`: a list of the
    inputs `step_fn` takes (this rank's). `rounds`: at most (at least 3, or `rounds` if fewer);
    `seconds`: no round starts that the rounds so far say would end past it. `device`: where the
    copies go (default: this rank's cuda device for a cuda topology, else cpu). `tracking`: an
    MLflow tracking URI, or True for the default store: rank 0 logs one run of the tune."""
    batches = check_inputs(planner, model, pg, batches, candidates, warmup, steps, rounds)
    device = device or tune_device(planner)
    began = time.monotonic()
    plans = shared_candidates(planner, model, sharders, pg, candidates, tracking)
    names = [name for name, _ in plans]
    turn = (batches, step_fn, warmup, steps, device)
    screen_s = seconds * SCREEN_SHARE if len(plans) > 1 else seconds
    costs, kept, skipped, spent = measure(
        model, sharders, pg, plans, turn, rounds, screen_s, seed, "screening"
    )
    screened = choose(costs, [names[j] for j in kept], seed)
    finalist = min(range(1, len(kept)), key=screened.ratios.__getitem__, default=None)
    winner, ratio, interval, confirm_ms, confirmation = 0, 1.0, (1.0, 1.0), (), None
    if finalist is None:
        reason = f"kept the reference ({names[0]}): no other candidate was measured"
    elif screened.ratios[finalist] >= 1.0:  # nothing to confirm
        reason, finalist = said_of(screened), None
    else:  # the reference and the screening's best, built afresh
        pair = [plans[0], plans[kept[finalist]]]
        found, both, lost, _ = measure(
            model, sharders, pg, pair, turn, rounds, max(seconds - spent, 0.0), seed + 1,
            "confirming",
        )  # fmt: skip
        skipped, confirm_ms = skipped + lost, tuple(tuple(row) for row in found.tolist())
        said = (
            f"{names[kept[finalist]]} measured cheapest of {len(kept)} in {len(costs)} "
            f"screening rounds ({screened.ratios[finalist]:.3f}x the reference); in "
            f"{len(found)} rounds of fresh copies of it and the reference: "
        )
        if len(both) < 2:
            reason = said + "it failed; kept the reference"
        else:
            confirmed = choose(found, [name for name, _ in pair], seed)
            reason = said + said_of(confirmed)
            confirmation = (confirmed.ratios[1], *confirmed.intervals[1])
            if confirmed.winner == 1:
                winner, ratio, interval = finalist, confirmed.ratios[1], confirmed.intervals[1]
    result = Tune(
        plan=plans[kept[winner]][1],
        name=names[kept[winner]],
        ratio=ratio,
        interval=interval,
        names=tuple(names[j] for j in kept),
        costs_ms=tuple(tuple(row) for row in costs.tolist()),
        ratios=tuple(screened.ratios),
        intervals=tuple(screened.intervals),
        skipped=tuple(skipped),
        reason=reason,
        seconds=time.monotonic() - began,
        finalist=names[kept[finalist]] if finalist is not None else None,
        confirm_ms=confirm_ms,
        confirmation=confirmation,
    )
    if tracking and pg.rank() == 0:
        log_run(result, tracking, {"warmup": warmup, "steps": steps, "seed": seed})
    return result


def said_of(choice) -> str:
    """`refine.choose`'s reason, which calls column 0 the planner's pick: here the reference."""
    return choice.reason.replace("the planner's pick", "the reference")


def check_inputs(planner, model, pg, batches, candidates, warmup, steps, rounds) -> list:
    """The batches as a list; one DreamshardError line for the first bad input."""
    world = planner.topology.world_size
    if pg is None or pg.size() != world:
        ranks = "no process group" if pg is None else f"a process group of {pg.size()} ranks"
        raise DreamshardError(
            f"tune: {ranks} but the planner's topology has {world} devices; pass the process "
            "group the model will train on"
        )
    batches = [] if batches is None else list(batches)
    if not batches:
        raise DreamshardError("tune: no batches; pass a list of this rank's training inputs")
    if candidates < 1:
        raise DreamshardError(f"tune: candidates={candidates}; measure at least 1 plan")
    if steps <= warmup:
        raise DreamshardError(
            f"tune: steps={steps} timed steps a round are not above warmup={warmup}; raise "
            "steps or lower warmup"
        )
    if rounds < 2:
        raise DreamshardError(f"tune: rounds={rounds}; at least 2 rounds tell noise apart")
    if not embedding_bag_collections(model):
        raise DreamshardError("tune: the model has no EmbeddingBagCollection to shard")
    if planner.topology.compute_device == "cuda" and not torch.cuda.is_available():
        raise DreamshardError("tune: the topology is on cuda but this process sees no GPU")
    return batches


def tune_device(planner) -> torch.device:
    """This rank's device of the topology's kind (cuda: LOCAL_RANK, else the current one)."""
    if planner.topology.compute_device != "cuda":
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", torch.cuda.current_device())))


def shared_candidates(planner, model, sharders, pg, k: int, tracking) -> list[tuple[str, object]]:
    """Rank 0's candidate plans on every rank, or rank 0's error on every rank (none waits for
    plans forever). Rank 0 also opens the tracking store first, so a bad URI stops every rank
    before anything is measured."""

    def make():
        if tracking:
            from dreamshard.tracking import connect

            connect(None if tracking is True else tracking)
        return planner.candidate_plans(model, sharders, k)

    return on_rank_zero(pg, make)


def measure(model, sharders, pg, plans, turn, rounds, seconds: float, seed: int, stage: str):
    """([rounds, kept] ms, the kept candidates' indices, [(name, error)] of those skipped, the
    seconds the rounds took by rank 0's clock, the same on every rank)."""
    names = [name for name, _ in plans]
    built, skipped = {}, []
    progress = Progress(MIN_ROUNDS * len(plans), f"tune: {stage}") if pg.rank() == 0 else None

    def agreed(j: int, mine, when: str):
        """Every rank's (ms, error, rank's clock) of this build or turn; a failure anywhere
        drops the candidate everywhere."""
        heard = exchange(pg, mine, names[j])
        errors = [error for _, error, _ in heard if error is not None]
        if not errors:
            return heard
        if j == 0:
            raise DreamshardError(
                f"tune: the reference plan ({names[j]}) failed {when}: {errors[0]}"
            )
        built.pop(j, None)
        skipped.append((names[j], errors[0]))
        if pg.rank() == 0:
            print(f"tune: skipped {names[j]} (failed {when}): {errors[0]}", file=sys.stderr)
        return None

    for j, (_, plan) in enumerate(plans):
        try:
            built[j], error = build(model, plan, sharders, pg, turn[-1]), None
        except Exception as exc:  # the candidate's problem, not the tune's: skipped
            error = first_line(exc)
        agreed(j, (None, error, 0.0), "while being built")
    rng, rows, start, clock = np.random.default_rng(seed), [], time.monotonic(), 0.0
    while len(rows) < rounds:
        if len(rows) >= min(MIN_ROUNDS, rounds) and clock * (len(rows) + 1) / len(rows) > seconds:
            break  # the next round would end past the budget (rank 0's clock, on every rank)
        row = {}
        order = rng.permutation(sorted(built)).tolist()
        found = timed_round([built[j] for j in order], *turn, pg)
        for j, mine in zip(order, found):
            heard = agreed(j, (*mine, time.monotonic() - start), f"in round {len(rows) + 1}")
            if heard is not None:
                row[j], clock = max(ms for ms, _, _ in heard), heard[0][2]
                if progress is not None:
                    progress.step(f"round {len(rows) + 1}, {names[j]}: {row[j]:.2f} ms")
        rows.append(row)
        if progress is not None:
            planned = int(seconds // max(clock / len(rows), 1e-9))
            progress.total = max(min(rounds, max(MIN_ROUNDS, planned)), len(rows)) * len(built)
    if progress is not None:
        progress.close()
    kept = sorted(built)
    built.clear()  # the sharded copies go now, not after the caller's process group
    gc.collect()
    return np.array([[row[j] for j in kept] for row in rows]), kept, skipped, clock


def build(model, plan, sharders, pg, device: torch.device):
    """A sharded copy of `model` by `plan` (the user's model and weights untouched)."""
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv

    return DistributedModelParallel(
        copy.deepcopy(model),
        env=ShardingEnv.from_process_group(pg),
        device=device,
        plan=plan,
        sharders=sharders,
    )


def timed_round(models: list, batches, step_fn, warmup: int, steps: int, device, pg) -> list:
    """Each model's (this rank's median ms, None) or (None, the error's first line) in one
    round: every model's `warmup` untimed steps, then one timed step of each in turn, `steps`
    times, so that a slow moment of the host falls on every candidate alike (the DMP backend's
    interleaving, `docs/torchrec.md` "DMP noise"). A model that raises takes no more steps."""
    times: list[list[float]] = [[] for _ in models]
    errors: list[str | None] = [None] * len(models)

    def step(m: int, i: int, timed: bool) -> None:
        if errors[m] is not None:
            return
        try:
            ms = one_step(models[m], batches[i % len(batches)], step_fn, device, pg)
        except Exception as exc:  # dropped on every rank once they hear of it
            errors[m] = first_line(exc)
            return
        if timed:
            times[m].append(ms)

    for m in range(len(models)):
        for i in range(warmup):
            step(m, i, False)
    for i in range(steps):
        for m in range(len(models)):
            step(m, warmup + i, True)
    return [
        (None, error) if error is not None else (float(np.median(found)), None)
        for found, error in zip(times, errors)
    ]


def one_step(sharded, batch, step_fn, device, pg) -> float:
    """One step of the user's, started from a barrier of every rank: this rank's ms."""
    cuda = device.type == "cuda"
    dist.barrier(group=pg)
    if cuda:
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    step_fn(sharded, batch)
    if cuda:
        torch.cuda.synchronize(device)
    return (time.perf_counter() - started) * 1000.0


def exchange(pg, mine, name: str) -> list:
    """Every rank's `mine`; one DreamshardError line when the collective fails (a rank died)."""
    heard = [None] * pg.size()
    try:
        dist.all_gather_object(heard, mine, group=pg)
    except Exception as exc:
        raise DreamshardError(
            f"tune: the ranks stopped answering while measuring {name}: {first_line(exc)}"
        ) from None
    return heard


def first_line(exc: BaseException) -> str:
    line = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def log_run(result: Tune, tracking, settings: dict) -> None:
    """One MLflow run of the tune in experiment `dreamshard-tune`, through `tracking`'s client
    (the one module that imports MLflow); a warning if it fails: the result still stands."""
    try:
        from dreamshard.tracking import connect, run_tags, use_experiment

        client = connect(None if tracking is True else tracking)
        run = client.create_run(
            use_experiment("tune"), run_name=f"tune: {result.name}", tags=run_tags()
        )
        run_id = run.info.run_id
        params = {
            **settings,
            "candidates": ", ".join(result.names)[:490],
            "skipped": ", ".join(name for name, _ in result.skipped)[:490] or "-",
            "winner": result.name,
            "rounds": result.rounds,
            "finalist": result.finalist or "-",
            "confirm_rounds": len(result.confirm_ms),
        }
        metrics = {"seconds": result.seconds, "winner_ratio": result.ratio}
        for j, name in enumerate(result.names):
            key = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
            low, high = result.intervals[j]
            metrics.update(
                {f"ratio.{key}": result.ratios[j], f"low.{key}": low, f"high.{key}": high}
            )
        for key, value in params.items():
            client.log_param(run_id, key, value)
        for key, value in metrics.items():
            client.log_metric(run_id, key, value)
        client.log_text(run_id, result.summary(), "tune.txt")
        client.set_terminated(run_id)
    except Exception as exc:  # noqa: BLE001  (the store, the network: the tune still stands)
        logging.getLogger("dreamshard").warning("tune: not logged to MLflow: %s", first_line(exc))

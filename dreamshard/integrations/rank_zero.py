"""Work done once, on rank 0, and its result (or its error) on every rank of a process group:
`DreamShardPlanner.collective_plan`'s plan and `tune`'s candidate plans."""

from __future__ import annotations

import torch.distributed as dist

from dreamshard.errors import DreamshardError


def on_rank_zero(pg, make):
    """`make()` on rank 0, its result broadcast to every rank; rank 0's error raised on every
    rank instead (DreamshardError's line, else its repr), so no rank waits forever."""
    result: list = [None, None]  # [what rank 0 made, its error]
    failure = None
    if pg.rank() == 0:
        try:
            result = [make(), None]
        except Exception as exc:  # any failure: sent on, then raised on rank 0 as it was
            failure = exc
            result = [None, str(exc) if isinstance(exc, DreamshardError) else repr(exc)]
    if pg.size() > 1:
        dist.broadcast_object_list(result, group=pg, group_src=0)
    if failure is not None:
        raise failure
    if result[1] is not None:
        raise DreamshardError(result[1])
    return result[0]

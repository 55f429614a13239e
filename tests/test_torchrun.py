"""Programs under torchrun: a result read back, a failure named in one line, a hang stopped."""

import os
import textwrap

import pytest

from dreamshard.costs.torchrun import TorchrunError, run_job, torchrun


def test_a_failing_rank_is_named_in_one_line():
    with pytest.raises(TorchrunError, match="No module named gpu_tasks.no_such_program"):
        run_job("gpu_tasks.no_such_program", 2, {"x": 1}, timeout_s=120)


def test_a_program_past_its_time_is_stopped_with_every_rank(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, pathlib, time
        pathlib.Path({str(tmp_path)!r}, "rank" + os.environ["RANK"]).write_text(str(os.getpid()))
        time.sleep(600)
        """)
    )
    with pytest.raises(TorchrunError, match="ran past 8 s and was stopped"):
        torchrun([str(script)], 2, timeout_s=8)
    pids = [int(p.read_text()) for p in tmp_path.glob("rank*")]
    assert len(pids) == 2  # both ranks had started
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

"""A progress line for long work: count, percentage, elapsed time and ETA on stderr."""

from __future__ import annotations

import sys
import time


class Progress:
    """One status line per step on stderr: count, percentage, elapsed and ETA."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.start, self.done = total, label, time.monotonic(), 0
        self.tty = sys.stderr.isatty()
        self.last_print = -1.0

    def step(self, note: str) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        now = time.monotonic()
        if not self.tty and self.done < self.total and now - self.last_print < 5.0:
            return  # in a log file, one line every few seconds is enough
        self.last_print = now
        line = (
            f"{self.label} [{self.done}/{self.total}] {self.done / self.total:4.0%} "
            f"{_clock(elapsed)} elapsed, ETA {_clock(eta)}  {note}"
        )
        print(
            ("\r" + line.ljust(100)) if self.tty else line,
            end="" if self.tty else "\n",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"

"""What `hw-profile sps` shows while it measures: the points done of all, the time so far and about how long is left.
On a terminal a tqdm bar; elsewhere (a log, CI, a pipe, a GPU lease's capture) a plain line at most every
``every_s`` seconds and one at the end, since a bar's carriage returns are noise there and a silent profile of many
minutes looks like a hang::

    sps qwen3-8b: 37/120 points, 1m12s elapsed, about 2m42s left

The time left is the points not yet done at the pace of the points timed so far: a skipped point (too big for the
memory, or left out after an earlier pass skipped it) takes no time, so it counts as done but not toward the pace.
Points grow along the grid (more requests, longer contexts), so early on the estimate is low; with ``--passes`` the
later passes repeat the first one's mix and it settles."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def duration(s: float) -> str:
    """45s, 1m12s, 2h05m: a profile's times as its user reads them."""
    s = round(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class PointProgress:
    """A profile's progress over ``total`` points (the grid times its passes; ``per_pass`` the grid, named in the
    line when there are several passes). ``update(n, timed)``: ``n`` more points done, their time spent measuring
    (``timed``) or not (skipped). ``clock``: the time source (a test's own)."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, per_pass: int | None = None):
        self.total, self.label, self.every_s, self.clock = total, label, every_s, clock
        self.stream = stream or sys.stderr
        self.passes = f" ({total // per_pass} passes of {per_pass})" if per_pass and per_pass < total else ""
        self.done = self.timed = 0
        self.spent = 0.0  # seconds of the timed points: those since the last update are charged to the next
        self.t0 = self.last = self.mark = clock()
        self.closed = False
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=f"sps {label}", unit="pt", file=self.stream, dynamic_ncols=True)

    def left_s(self) -> float | None:
        """Seconds left at the pace of the timed points; None before one was timed, or when all are done."""
        if self.timed == 0 or self.done >= self.total:
            return None
        return (self.total - self.done) * self.spent / self.timed

    def line(self) -> str:
        left = self.left_s()
        return (f"sps {self.label}: {self.done}/{self.total} points{self.passes}, "
                f"{duration(self.clock() - self.t0)} elapsed"
                + (f", about {duration(left)} left" if left is not None else ""))

    def update(self, n: int = 1, timed: bool = True) -> None:
        if n <= 0:  # the profiler's "none of these skipped": nothing to show
            return
        now = self.clock()
        if timed:
            self.timed += n
            self.spent += now - self.mark
        self.mark = now
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif now - self.last >= self.every_s:
            self.last = now
            self._write()

    def set_postfix_str(self, s: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(s)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.bar is not None:
            self.bar.close()
        elif self.done:
            self._write()

    def _write(self) -> None:
        self.stream.write(self.line() + "\n")
        self.stream.flush()


class NoProgress:
    """``--quiet``: nothing shown."""

    def update(self, n: int = 1, timed: bool = True) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass

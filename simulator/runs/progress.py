"""Progress of a command's runs: a bar on a terminal, plain lines elsewhere (a log file, CI, a pipe), where a
bar's carriage returns are noise and silence looks like a hang."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class LineProgress:
    """``desc: N[/TOTAL] runs done, S s`` at most every ``every_s`` seconds, and once more at the end (``unit``
    names what is counted, ``runs`` unless told)."""

    def __init__(self, desc: str, total: int | None, stream: TextIO, every_s: float = 10.0, unit: str = "runs"):
        self.desc, self.total, self.stream, self.every_s, self.unit = desc, total, stream, every_s, unit
        self.n = 0
        self.t0 = self.last = time.monotonic()
        self.closed = False

    def _line(self) -> None:
        of = f"/{self.total}" if self.total is not None else ""
        self.stream.write(f"{self.desc}: {self.n}{of} {self.unit} done, {time.monotonic() - self.t0:.0f} s\n")
        self.stream.flush()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self._line()

    def close(self) -> None:
        if not self.closed and self.n:
            self._line()
        self.closed = True


def progress_bar(desc: str, total: int | None = None, stream: TextIO | None = None, every_s: float = 10.0,
                 unit: str = "run", units: str = "runs"):
    """A tqdm bar when ``stream`` (default stderr) is a terminal, else ``LineProgress`` (``unit``, ``units``: what
    is counted, singular and plural)."""
    stream = stream or sys.stderr
    if stream.isatty():
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True)
    return LineProgress(desc, total, stream, every_s, units)

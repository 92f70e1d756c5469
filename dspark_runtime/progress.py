"""Progress lines for long work (stderr, with elapsed time), so a 20-minute build is never silent."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, quiet: bool = False, stream=None):
        self.t0 = time.monotonic()
        self.quiet = quiet
        self.stream = stream or sys.stderr

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(f"[{self.elapsed():7.1f}s] {msg}", file=self.stream, flush=True)

    def every(self, step: int, total: int, n: int = 10) -> bool:
        """True on about n evenly spaced steps (and the last one)."""
        return step == total - 1 or step % max(1, total // n) == 0

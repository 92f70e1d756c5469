"""Progress of a command's runs: a bar on a terminal, plain lines elsewhere (a log file, CI, a pipe), where a
bar's carriage returns are noise and silence looks like a hang.

A sweep knows its runs before it starts (``progress_bar``). A plan learns them as it searches, so its progress
(``PlanProgress``) says where its searches stand: how many are decided, the GPU counts (or the headroom) each
open one still brackets, and the most candidates their bounds leave them to ask. Both give an estimate of the
time left from the pace at which this command's runs have finished so far (their own wall times, with however
many run side by side): for a plan, of the runs its open searches may still ask; for one that does not say
where its searches stand (a fleet's, a day plan's), of the runs known so far, which later candidates add to.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

WIDTH = 120  # columns of a plan's progress line off a terminal


def eta_s(done: int, total: int | None, elapsed_s: float) -> float | None:
    """Seconds left for ``total - done`` runs at the pace the ``done`` ones took (``elapsed_s`` for all of them);
    None before any finished or without a total."""
    if total is None or done <= 0 or elapsed_s <= 0:
        return None
    return max(total - done, 0) * elapsed_s / done


def seconds(s: float) -> str:
    """A duration as a planner reads it: 45 s, 12 min, 1.5 h."""
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


class LineProgress:
    """``desc: N[/TOTAL] runs done, S s[, about E left]`` at most every ``every_s`` seconds, and once more at the end
    (``unit`` names what is counted, ``runs`` unless told). ``clock``: the time source (a test's own clock)."""

    def __init__(self, desc: str, total: int | None, stream: TextIO, every_s: float = 10.0, unit: str = "runs",
                 clock: Callable[[], float] = time.monotonic, of_what: str = ""):
        self.desc, self.total, self.stream, self.every_s, self.unit = desc, total, stream, every_s, unit
        self.of_what = of_what  # what the total counts, when not plain (a plan's: " (known so far)")
        self.clock = clock
        self.n = 0
        self.t0 = self.last = clock()
        self.closed = False
        self.postfix = ""  # what is being done now (PlanProgress)
        self.text: Callable[[int, float], str] | None = None  # the whole line from (done, elapsed), when set

    def line(self) -> str:
        if self.text is not None:
            return self.text(self.n, self.clock() - self.t0)
        of = f"/{self.total}" if self.total is not None else ""
        elapsed = self.clock() - self.t0
        eta = eta_s(self.n, self.total, elapsed) if self.n < (self.total or 0) else None
        left = f", about {seconds(eta)} left" if eta is not None else ""
        now = f"; {self.postfix}" if self.postfix else ""
        return f"{self.desc}: {self.n}{of} {self.unit} done{self.of_what}, {elapsed:.0f} s{left}{now}"

    def _write(self) -> None:
        self.stream.write(self.line() + "\n")
        self.stream.flush()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last = now
            self._write()

    def close(self) -> None:
        if not self.closed and self.n:
            self._write()
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


class PlanProgress:
    """A plan's progress: ``queued`` hears runs as the planner hands them to the backend, ``stored`` (a
    planner's ``on_stored``) each finished one. Off a terminal, every ``every_s`` seconds and at the end::

        peak: plan runs: 248/260 runs done (known so far), 1073 s, about 52 s left; searching dspark at 4 GPUs,
        goodput-k at 6 GPUs

    the ETA of the runs known so far, which later candidates add to. A plan that says where its searches stand
    (``follow``: Planner.outlook) is told by those instead::

        peak: plan runs: 5/9 searches decided; open: mtp-1 4-8 GPUs and 3 more; 96 runs done, 212 s; at most 31
        candidates (93 runs at 3 seeds) left, about 3 min

    (one line: as many open searches as fit 120 columns, each with what it still brackets, the rest counted)

    the ETA from the bounds of every search still open. On a terminal, a bar whose total is the runs done and
    those that may be left, with the same words beside it."""

    def __init__(self, desc: str, stream: TextIO | None = None, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, shown: int = 3):
        stream = stream or sys.stderr
        self.desc = desc
        self.shown = shown
        self.tables: set[str] = set()
        self.searching: list[str] = []
        self.sources: list[tuple[str, Callable[[], list[dict]]]] = []
        self.seeds = 1
        if stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=0, desc=desc, unit="run", file=stream, dynamic_ncols=True)
            self.lines = None
        else:
            self.bar = None
            self.lines = LineProgress(desc, 0, stream, every_s, "runs", clock, " (known so far)")

    def follow(self, sources: list[tuple[str, Callable[[], list[dict]]]], seeds: int) -> None:
        """Tell the progress by these searches' own bounds: (label, a planner's ``outlook``) each (labels name
        a hardware option; '' for one plan), every candidate at ``seeds`` seeds at most."""
        self.sources, self.seeds = sources, seeds
        if self.lines is not None:
            self.lines.text = self.status

    def searches(self) -> list[dict]:
        return [{**e, "name": f"{label}{e['name']}"} for label, outlook in self.sources for e in outlook()]

    def status(self, done: int, elapsed: float) -> str:
        """The line of a plan that follows its searches: how many are decided, what each open one has left
        open, the runs done, and the time left for the candidates they may still ask, at this command's pace."""
        found = self.searches()
        open_ = [e for e in found if not e["done"]]
        head = f"{self.desc}: {len(found) - len(open_)}/{len(found)} searches decided"
        tail = f"; {done} runs done, {elapsed:.0f} s"
        left = sum(e["left"] for e in open_)
        if left:
            runs = left * self.seeds
            seeds = f" at {self.seeds} seeds" if self.seeds > 1 else ""
            pace = eta_s(done, done + runs, elapsed)
            tail += f"; at most {left} candidates ({runs} runs{seeds}) left"
            tail += f", about {seconds(pace)}" if pace is not None else ", pace not known yet"
        if not open_:
            return head + tail
        # as many open searches as fit a WIDTH-column log line (at least one, a few at most), the rest counted
        for k in range(min(self.shown, len(open_)), 0, -1):
            more = f" and {len(open_) - k} more" if len(open_) > k else ""
            line = head + "; open: " + ", ".join(f"{e['name']} {e['open']}" for e in open_[:k]) + more + tail
            if len(line) <= WIDTH or k == 1:
                return line
        return line

    @property
    def total(self) -> int:
        return int(self.bar.total) if self.bar is not None else int(self.lines.total)

    @property
    def done(self) -> int:
        return int(self.bar.n) if self.bar is not None else self.lines.n

    def queued(self, tasks: list) -> None:
        """A round's runs (``backends.Task``), handed to the backend now: the total grows, and what they search
        is what the line says is being searched."""
        if not tasks:
            return
        self.tables.update(Path(t.scn.model.hardware.table).stem for t in tasks)
        seen: dict[str, None] = {}
        for t in tasks:
            seen.setdefault(self.describe(t), None)
        self.searching = list(seen)
        if self.bar is not None:
            self.bar.total += len(tasks)
            self.bar.set_postfix_str(self.postfix(), refresh=True)
        else:
            self.lines.total += len(tasks)
            self.lines.postfix = self.postfix()
        self._follow_bar()

    def _follow_bar(self) -> None:
        """On a terminal, a followed plan's bar: its total the runs done and those its searches may still ask."""
        if self.bar is None or not self.sources:
            return
        found = self.searches()
        self.bar.total = int(self.bar.n) + sum(e["left"] for e in found if not e["done"]) * self.seeds
        open_ = [f"{e['name']} {e['open']}" for e in found if not e["done"]]
        self.bar.set_postfix_str(f"{len(found) - len(open_)}/{len(found)} decided; open: " + ", ".join(open_[:self.shown]),
                                 refresh=True)

    def describe(self, task) -> str:
        """The system a run searches and the size it tries (GPUs, the prefill pool's included), and the table
        when the plan compares hardware."""
        hw = task.scn.model.hardware
        gpus = hw.replicas * hw.gpus_per_replica
        if hw.prefill_replicas:
            gpus += hw.prefill_replicas * (hw.prefill_gpus_per_replica or hw.gpus_per_replica)
        where = f" on {Path(hw.table).stem}" if len(self.tables) > 1 else ""
        return f"{task.spec.system.name} at {gpus} GPU{'s' if gpus != 1 else ''}{where}"

    def postfix(self) -> str:
        if not self.searching:
            return ""
        more = len(self.searching) - self.shown
        return "searching " + ", ".join(self.searching[: self.shown]) + (f" and {more} more" if more > 0 else "")

    def stored(self, task=None) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self._follow_bar()
        else:
            self.lines.update(1)

    def update(self, n: int = 1) -> None:
        for _ in range(n):
            self.stored()

    def close(self) -> None:
        self.searching = []  # the last line says what was done, not what was searched last
        if self.bar is not None:
            self.bar.set_postfix_str("", refresh=False)
            self.bar.close()
        else:
            self.lines.postfix = ""
            self.lines.close()

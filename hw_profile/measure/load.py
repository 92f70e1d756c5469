"""Is the CPU a table is measured on busy with other work? Checked before and during a CPU ``hw-profile sps`` run.

A CPU table measured while other processes compete for the cores comes out slower and noisier than the machine
is, with nothing in the numbers saying so (one such table was ~7x slow and non-monotone in B). Two signs are
checked, and both are recorded in the sidecar (``machine_load``) and printed as a warning line when high:

- **oversubscription**: the 1-minute load average counts runnable threads. Before the run it is all other work;
  during it, the profile's own torch threads are part of it, so the competing load is the average less those
  threads. The machine is oversubscribed when competing load + the profile's threads exceed the cores by
  ``OVERSUBSCRIBED`` (half a core: the load average is itself noisy, and a shell or a monitor adds a little);
- **spread of repeats**: per point, (p90 - p10) / median of its timed forwards. A quiet CPU repeats one forward
  within a few percent; a median spread over the points above ``SPREAD`` means the timings carry someone
  else's bursts.

The load average lags (it is a one-minute exponential average), so the during-run figure is the largest seen
after any point; a burst shorter than that shows up in the spread rather than in the load.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

OVERSUBSCRIBED = 0.5  # runnable threads beyond the cores (after the profile's own) that count as a busy machine
SPREAD = 0.25  # median over points of (p90 - p10) / median that counts as noisy repeats


def load_average() -> float | None:
    """The 1-minute load average, or None where the platform has none."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return None


def competing(load: float, own_threads: int) -> float:
    """Runnable threads other than the profile's: the load average less the profile's threads (while it runs)."""
    return max(load - own_threads, 0.0)


def oversubscribed(other: float, threads: int, cores: int) -> bool:
    return other + threads - cores >= OVERSUBSCRIBED


def relative_spread(p10: np.ndarray, p90: np.ndarray, median: np.ndarray) -> float:
    """The median over points of (p90 - p10) / median; NaN without points."""
    p10, p90, median = (np.asarray(a, dtype=float) for a in (p10, p90, median))
    ok = np.isfinite(p10) & np.isfinite(p90) & (median > 0)
    return float(np.median((p90[ok] - p10[ok]) / median[ok])) if ok.any() else float("nan")


@dataclass
class LoadWatch:
    """The load seen over one profile: before it starts (``before``), then after each point (``during``)."""

    cores: int
    threads: int
    before: float | None = None
    during_max: float | None = None
    warned: set = field(default_factory=set)

    @classmethod
    def start(cls, threads: int, cores: int | None = None) -> LoadWatch:
        watch = cls(cores=cores or os.cpu_count() or 1, threads=threads)
        watch.before = load_average()
        return watch

    def sample(self) -> None:
        load = load_average()
        if load is not None:
            self.during_max = load if self.during_max is None else max(self.during_max, load)

    def warnings(self, spread: float | None = None) -> list[str]:
        """The warning lines the numbers so far call for, each once per watch (later calls return new ones)."""
        out = []
        if self.before is not None and oversubscribed(self.before, self.threads, self.cores):
            out.append(("before", f"warning: machine load: load average {self.before:.2f} on {self.cores} cores "
                        f"before the run, with {self.threads} profiling thread(s) on top: the table will be slower "
                        "and noisier than this machine is; measure on a quiet machine or say so with --note"))
        if self.during_max is not None:
            other = competing(self.during_max, self.threads)
            if oversubscribed(other, self.threads, self.cores):
                out.append(("during", f"warning: machine load: {other:.2f} runnable threads besides the profile's "
                            f"{self.threads} on {self.cores} cores during the run (load average up to "
                            f"{self.during_max:.2f}): step times include waiting for the CPU"))
        if spread is not None and np.isfinite(spread) and spread > SPREAD:
            out.append(("spread", f"warning: machine load: repeats spread {spread:.0%} (median over points of "
                        f"(p90 - p10) / median, quiet is under {SPREAD:.0%}): other work interrupted the timings; "
                        "more --passes spread its bursts over the grid"))
        new = [(key, line) for key, line in out if key not in self.warned]
        self.warned |= {key for key, _ in new}
        return [line for _, line in new]

    def record(self, spread: float | None) -> dict:
        """The sidecar's ``machine_load``."""
        other = competing(self.during_max, self.threads) if self.during_max is not None else None
        busy = ((self.before is not None and oversubscribed(self.before, self.threads, self.cores))
                or (other is not None and oversubscribed(other, self.threads, self.cores)))
        noisy = spread is not None and bool(np.isfinite(spread)) and spread > SPREAD
        return {
            "cores": self.cores,
            "threads": self.threads,
            "load_before": None if self.before is None else round(self.before, 2),
            "load_max_during": None if self.during_max is None else round(self.during_max, 2),
            "competing_max_during": None if other is None else round(other, 2),
            "repeat_spread_median": None if spread is None or not np.isfinite(spread) else round(spread, 4),
            "verdict": "busy" if busy else ("noisy" if noisy else "quiet"),
        }

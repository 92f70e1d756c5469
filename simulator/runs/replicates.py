"""A plan candidate over several seeds: the mean run, a 95% interval on its SLA attainment, and a judgement with
three outcomes.

Every seed is a replicate of the same candidate: the same traffic and workload distributions, another draw.
Systems share the draws of a seed (common random numbers: the arrivals and the requests come from streams keyed
by the seed alone, ``run._stream``), so at one seed every system serves the same requests. Across seeds the
attainment varies; its mean over N seeds has a Student-t interval (``frontier.mean_ci``). A candidate

- meets when every seed meets and the interval's lower bound clears the attainment target;
- fails when every seed fails, or the interval's upper bound is below the target;
- is unresolved otherwise: at this many seeds the data cannot tell (a plateau around the target), and the plan
  says so rather than let one draw pick the answer. A search treats it as not met (the bound it reports is one
  the data support) and remembers it, which is how the plan reports a range of counts.

With one seed there is no interval: a candidate meets or fails as that run does.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import numpy as np

from simulator.outputs.frontier import mean_ci

UNRESOLVED = "unresolved"
SUMMED = ("requests", "unfinished", "steps", "rejected", "preemptions", "prefix_hits", "prefix_misses",
          "prefix_hit_tokens", "prefix_evictions")
ANY = ("saturated", "prefill_saturated")


def combine(rows: list[dict]) -> dict:
    """One row standing for the replicates: numeric fields averaged over seeds (counts summed, flags true when
    any seed's is), with ``attainment_lo``/``attainment_hi`` (95%; the value itself with one seed) and the rows
    themselves under ``replicate_rows``."""
    if len(rows) == 1:
        out = dict(rows[0])
        out["attainment_lo"] = out["attainment_hi"] = out.get("sla_attainment")
    else:
        out = {}
        for k, v in rows[0].items():
            values = [r.get(k) for r in rows]
            if k in ANY:
                out[k] = any(bool(x) for x in values)
            elif k in SUMMED:
                out[k] = sum(int(x or 0) for x in values)
            elif isinstance(v, int | float) and not isinstance(v, bool):
                arr = np.array([np.nan if x is None else float(x) for x in values])
                out[k] = float(np.nanmean(arr)) if not np.isnan(arr).all() else float("nan")
            else:
                out[k] = v
        mean, hw = mean_ci(np.array([r["sla_attainment"] for r in rows], dtype=float))
        out["sla_attainment"] = mean
        out["attainment_lo"] = max(mean - hw, 0.0) if not math.isnan(hw) else mean
        out["attainment_hi"] = min(mean + hw, 1.0) if not math.isnan(hw) else mean
        out["seeds"] = [r.get("seed") for r in rows]
    out["replicate_rows"] = rows
    return out


def judge(row: dict, one: Callable[[dict], str | None], target_attainment: float | None) -> str | None:
    """None (meets), a shortfall, or ``unresolved: ...`` for a combined row (``combine``), from ``one``, the
    judgement of a single run, and the attainment target (None: the judgement has no attainment, a prefill
    pool's)."""
    rows = row.get("replicate_rows") or [row]
    whys = [one(r) for r in rows]
    if len(rows) == 1:
        return whys[0]
    failing = [w for w in whys if w is not None]
    lo, hi = row.get("attainment_lo"), row.get("attainment_hi")
    clears = target_attainment is None or (lo is not None and lo >= target_attainment)
    if not failing and clears:
        return None
    below = target_attainment is not None and hi is not None and hi < target_attainment
    if len(failing) == len(rows) or below:
        common, _ = Counter(failing or ["attainment"]).most_common(1)[0]
        return f"{common} ({len(failing)} of {len(rows)} seeds fail)" if failing else common
    interval = (f"attainment {row['sla_attainment']:.1%} (95% {lo:.1%}-{hi:.1%}), target {target_attainment:.0%}; "
                if target_attainment is not None else "")
    return f"{UNRESOLVED}: {interval}{len(rows) - len(failing)} of {len(rows)} seeds meet"


def unresolved(why: str | None) -> bool:
    return bool(why) and why.startswith(UNRESOLVED)

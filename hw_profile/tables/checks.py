"""Table invariants: what a step-time table must hold to be trusted as it stands, checked on the table alone.

``hw-profile check TABLE`` prints them, ``simulate check`` (and a run, once) prints them for every table a scenario
reads. Each is one line per table (the worst case named, the others counted), prefixed with its number:

- **T-1 Step time does not fall as work grows**, beyond the table's own noise. Along B at one K (and along K at
  one B), a later point more than ``DROP`` faster than an earlier one whose p10-p90 spreads do not overlap (the
  later point's p90 below the earlier one's p10; a table without spreads, an analytic or estimated one, is judged
  by ``DROP`` alone). A measured table's points of one (B, K) can come from different request shapes (4 requests
  of 1 token and 1 request of 4 tokens are both B = 4), which differ for real; so where the table records
  ``requests``, points are compared only with points of the same number of requests. ``DROP`` is 20%: repeats of
  one GPU point agree within a few percent, and the legitimate dips of a measured table (a GEMM tile or a CUDA
  graph size that suits one B better than a smaller one) stay near 10%; a point ten times its neighbour (a step
  measured while something else ran, an edited row) is far past both.
- **T-2 A measurement was quiet**: the sidecar's ``machine_load.verdict`` is not ``busy``
  (``hw_profile.measure.load``: other work competed for the CPU).
- **T-3 No point was measured while the GPU throttled**, after its re-measures (the ``throttled`` column: an NVML
  clocks-event reason such as a power cap or heat slowed the GPU during the timed window), unless its SM clock
  stayed within ``THROTTLE_CLOCK_TOLERANCE`` of the top.
- **T-4 No point is faster than the table's own roofline bound**, which is impossible: the bound is the time to
  read the weights every step reads whatever the routing (the dense part) and the KV cache (as the table priced
  it, the rule the KV pool is sized by) at the device's datasheet bandwidth, or to do the step's matmul FLOPs (the
  LM head left out: an engine may compute logits for some tokens only) at its datasheet peak for the dtype,
  whichever is longer, spread evenly over the table's GPUs. Everything else a step does only adds to it. It needs
  the sidecar's model shape, datasheet (its ``gpu`` block: the device is never parsed from a name) and dtype; a
  table without them is skipped without a word, and so is a drafter's table calibrated as a share of its target
  (its model shape is the target's, not the drafter's). A point is named when it is more than ``BOUND_SLACK``
  below the bound (datasheet figures are rounded, and a part can be a variant of the named one), and only where
  its KV cache fits beside the weights (``kv_room``): an estimate's grid runs past the memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hw_profile.hardware.dtypes import DTYPE_BYTES
from hw_profile.tables.sidecar import Sidecar
from hw_profile.tables.step_table import StepTable, throttled_flags
from hw_profile.tables.table_set import TableSet

DROP = 0.2  # a later point this much faster than an earlier one (and outside both spreads) is not noise
BOUND_SLACK = 0.1  # how far below the roofline bound a point may sit before it is named
THROTTLE_CLOCK_TOLERANCE = 0.02  # a throttled point whose SM clock stayed this close to the top is not named


@dataclass(frozen=True)
class Fall:
    """The worst pair of points where step time falls as work grows along ``axis`` (``B`` or ``K``)."""

    axis: str
    points: int  # later points faster than some earlier point of their row, beyond the noise
    at: tuple[float, float, float]  # (B, K, ms) of the faster, later point
    before: tuple[float, float, float]  # (B, K, ms) of the earlier point it is compared with


def table_warnings(table: StepTable, label: str, kv_limit: float | None = None) -> list[str]:
    """Every invariant this module checks, for one table; ``label`` names it (its path and where it is used).
    ``kv_limit``: the most KV tokens a step can hold where the table is used (a drafter's table: its target's
    memory decides), else what the table's own device holds beside its weights."""
    return [*fall_lines(table, label), *load_lines(table, label), *bound_lines(table, label, kv_limit)]


def set_warnings(tables: TableSet, label: str | None = None) -> list[str]:
    """``table_warnings`` for a table set: its target and every drafter table it names, a drafter's steps bounded
    by its target's memory."""
    where = label or str(tables.target.path)
    room = kv_room(tables.facts)
    out = table_warnings(tables.target, where, room)
    for name, drafter in sorted(tables.drafters.items()):
        out += table_warnings(drafter.table, f"{drafter.table.path} (drafter {name})", room)
    return out


# --- 1. step time that falls as work grows -------------------------------------------------------------------

def falls(table: StepTable) -> list[Fall]:
    """Where step time falls beyond noise as B grows at one K, and as K grows at one B (at most one Fall each)."""
    ok = table.ok
    b = ok["batch_tokens"].to_numpy(float)
    k = ok["kv_tokens"].to_numpy(float)
    t = ok["step_ms"].to_numpy(float)
    p10 = _spread(ok["step_ms_p10"], t, np.minimum)
    p90 = _spread(ok["step_ms_p90"], t, np.maximum)
    requests = pd.to_numeric(ok["requests"], errors="coerce").fillna(-1.0).to_numpy()
    out = []
    for axis, x, row in (("B", b, k), ("K", k, b)):
        flagged: set[int] = set()
        worst: tuple[float, int, int] | None = None
        frame = pd.DataFrame({"row": row, "requests": requests})
        for idx in frame.groupby(["row", "requests"]).indices.values():
            if len(idx) < 2:
                continue
            idx = idx[np.argsort(x[idx], kind="stable")]
            xs, ts, lo, hi = x[idx], t[idx], p10[idx], p90[idx]
            # later (j) against earlier (i): more work, less time, outside both spreads
            later = xs[None, :] > xs[:, None]
            fall = later & (ts[None, :] < (1.0 - DROP) * ts[:, None]) & (hi[None, :] < lo[:, None])
            if not fall.any():
                continue
            flagged.update(int(idx[j]) for j in np.flatnonzero(fall.any(axis=0)))
            ratio = np.where(fall, ts[None, :] / ts[:, None], np.inf)
            i, j = np.unravel_index(int(np.argmin(ratio)), ratio.shape)
            if worst is None or ratio[i, j] < worst[0]:
                worst = (float(ratio[i, j]), int(idx[i]), int(idx[j]))
        if worst is not None:
            _, i, j = worst
            out.append(Fall(axis, len(flagged), (b[j], k[j], t[j]), (b[i], k[i], t[i])))
    return out


def _spread(column: pd.Series, t: np.ndarray, side) -> np.ndarray:
    """A spread column as numbers, the median itself where it is missing (and never inside the median)."""
    v = pd.to_numeric(column, errors="coerce").to_numpy(float)
    return side(np.where(np.isfinite(v), v, t), t)


def fall_lines(table: StepTable, label: str) -> list[str]:
    lines = []
    for f in falls(table):
        grows, fixed = ("batch", "K") if f.axis == "B" else ("context (K)", "B")
        (b, k, ms), (b0, k0, ms0) = f.at, f.before
        where = f"B = {b:,.0f} at K = {k:,.0f}" if f.axis == "B" else f"K = {k:,.0f} at B = {b:,.0f}"
        before = f"B = {b0:,.0f}" if f.axis == "B" else f"K = {k0:,.0f}"
        lines.append(f"{label}: T-1: step time falls as the {grows} grows, beyond the table's noise, at {f.points} "
                     f"point(s) (compared at one {fixed}); the worst: {where} takes {ms:.3g} ms, {ms / ms0:.2f}x the "
                     f"{ms0:.3g} ms at {before}: one of the two is wrong (measured while something else ran, or an "
                     "edited row); measure it again, or smooth the table (hw-profile fit)")
    return lines


# --- 2. a measurement that was not quiet ---------------------------------------------------------------------

def load_lines(table: StepTable, label: str) -> list[str]:
    lines = []
    facts = table.facts
    load = facts.machine_load
    if load.get("verdict") == "busy":
        seen = [f"{name} {load[key]}" for key, name in (("load_before", "load average before"),
                                                        ("competing_max_during", "competing threads during"))
                if load.get(key) is not None]
        cores = f" on {load['cores']} cores" if load.get("cores") else ""
        lines.append(f"{label}: T-2: measured on a busy machine (sidecar machine_load.verdict busy: "
                     f"{', '.join(seen) or 'other work competed'}{cores}): its step times are slower and noisier "
                     "than the hardware; measure it again on a quiet machine")
    ok = table.ok
    hot = throttled_flags(ok["throttled"]) & ~near_full_clock(ok, facts.max_sm_clock_mhz)
    if hot.any():
        reasons = sorted({r for text in ok.loc[hot, "throttle_reasons"].astype(str)
                          for r in text.replace(";", ",").split(",") if r.strip()})
        why = f" ({', '.join(r.strip() for r in reasons)})" if reasons else ""
        lines.append(f"{label}: T-3: {int(hot.sum())} of {len(ok)} points were measured while the GPU throttled "
                     f"its clocks{why}, even after re-measuring: their step times are slower than the hardware; let "
                     "it cool or lift the power cap, and measure them again")
    return lines


def near_full_clock(points, top: float | None, within: float = THROTTLE_CLOCK_TOLERANCE):
    """Points whose SM clock stayed within ``within`` of the GPU's maximum ``top`` (the sidecar's telemetry): NVML
    names a throttle reason (a power cap) whenever it holds the clock even one step below the top, and a clock 2%
    down slows a step by at most 2%, far inside the step-time errors a plan carries (docs/sim-to-real.md). False
    where either clock is unknown."""
    if "sm_clock_mhz" not in points or top is None:
        return np.zeros(len(points), dtype=bool)
    clock = pd.to_numeric(points["sm_clock_mhz"], errors="coerce").to_numpy(dtype=float)
    return np.nan_to_num(clock, nan=0.0) >= (1.0 - within) * float(top)


# --- 3. faster than the table's own roofline bound -----------------------------------------------------------

def roofline_bound_ms(facts: Sidecar, batch_tokens: np.ndarray, kv_tokens: np.ndarray) -> np.ndarray | None:
    """The lower bound on step time (ms) at each (B, K) for the table's model, datasheet and dtype (the module's
    docstring says what it counts); None when the sidecar lacks one of them."""
    shape, dep = facts.shape, facts.deployment
    if facts.drafter.calibrated_share or shape is None or dep.datasheet is None or dep.dtype not in DTYPE_BYTES:
        return None  # a drafter priced as a share of the target: its model_shape is the target's
    b = np.asarray(batch_tokens, dtype=float)
    k = np.asarray(kv_tokens, dtype=float)
    weights = shape.dense_params_per_gpu(dep.gpus) * DTYPE_BYTES[dep.dtype]
    read = weights + k * kv_read_bytes_per_gpu(facts)
    flops = 2.0 * shape.params_per_gpu(shape.matmul_params - shape.head_params, dep.gpus) * b
    peak = max(dep.datasheet.peak_tflops(d) for d in {dep.dtype, shape.expert_dtype or dep.dtype})
    return np.maximum(read / (dep.datasheet.hbm_tb_s * 1e12), flops / (peak * 1e12)) * 1e3


def kv_room(facts: Sidecar) -> float | None:
    """The most KV tokens that fit beside the weights in the device's memory, per GPU as the table priced them
    (None when the sidecar does not say enough to tell)."""
    memory = facts.memory
    if memory is None or memory.kv_bytes_per_token_per_gpu <= 0:
        return None
    return max(memory.device_memory_gb * 1e9 - memory.weight_bytes_per_gpu, 0.0) / memory.kv_bytes_per_token_per_gpu


def kv_read_bytes_per_gpu(facts: Sidecar) -> float:
    """KV bytes one GPU reads per context token: what one token holds there as the table priced its cache (the
    memory facts the KV pool is sized by), less what a compressed sparse attention skips
    (``ModelShape.kv_read_bytes_per_token``); 0 for a shape without a cache."""
    shape, memory = facts.shape, facts.memory
    if shape is None or not shape.kv_bytes_per_token:
        return 0.0
    if facts.target_shape is not None or memory is None:
        # a profile of part of a model (a drafter, or --layers N): its sidecar records the whole target's cache,
        # which sizes the KV pool, but its steps read only the cache of the layers they ran
        dep = facts.deployment
        kv = facts.deployment.kv_dtype or dep.dtype
        if kv not in DTYPE_BYTES:
            return 0.0
        held = shape.kv_cache_facts(DTYPE_BYTES[kv], dep.gpus, dep.gpus)["kv_bytes_per_token_per_gpu"]
    else:
        held = memory.kv_bytes_per_token_per_gpu
    return max(held, 0.0) * min(shape.kv_read_bytes_per_token / shape.kv_bytes_per_token, 1.0)


def bound_lines(table: StepTable, label: str, kv_limit: float | None = None) -> list[str]:
    ok = table.ok
    b = ok["batch_tokens"].to_numpy(float)
    k = ok["kv_tokens"].to_numpy(float)
    t = ok["step_ms"].to_numpy(float)
    facts = table.facts
    bound = roofline_bound_ms(facts, b, k)
    if bound is None:
        return []
    # a point whose KV cache does not fit beside the weights is one no deployment reaches: an estimate's grid runs
    # past the memory (to --max-kv-tokens), and what it says there misleads nobody
    limit = kv_room(facts) if kv_limit is None else kv_limit
    fast = t < (1.0 - BOUND_SLACK) * bound
    if limit is not None:
        fast &= k <= limit
    if not fast.any():
        return []
    i = int(np.argmin(np.where(fast, t / bound, np.inf)))
    dep = facts.deployment
    what = f"{facts.shape.name or 'its model'} on {dep.gpus} x {dep.datasheet.name} in {dep.dtype}"
    return [f"{label}: T-4: {int(fast.sum())} of {len(t)} points (B {_span(b[fast])}, K {_span(k[fast])}) are faster "
            f"than the table's own roofline bound for {what} (the weights read at the datasheet bandwidth, the "
            f"FLOPs at its peak), which is impossible; the worst: B = {b[i]:,.0f} at K = {k[i]:,.0f} takes "
            f"{t[i]:.3g} ms against a bound of {bound[i]:.3g} ms: the table or its sidecar's model, device or dtype "
            "is wrong there"]


def _span(values: np.ndarray) -> str:
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:,.0f}" if lo == hi else f"{lo:,.0f}..{hi:,.0f}"

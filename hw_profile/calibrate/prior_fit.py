"""Calibrate an estimated table on one to three measured points, fitting only what the points identify.

An estimate T0(B, K) (``hw-profile estimate``) splits into what a single stream pays and what load adds:

    T(B, K) = T0(1, 0) + f + s x [T0(B, 0) - T0(1, 0)] + c x [T0(B, K) - T0(B, 0)]

with three terms, each 0 or 1 in the prior (f = 0, s = c = 1):

- ``f``, the per-step cost (ms): moved by a single-stream point, where nearly all of the step is fixed cost and
  weight reads, and by any point once a second one pins the load;
- ``s``, the per-token scale: what each extra token of a step costs against the estimate's price (the GEMMs,
  experts, sampling that grow with B);
- ``c``, the per-KV-token scale: what context costs against the estimate's price.

Which terms a set of points identifies: one point moves f when it is a single-stream point (B at most
``SINGLE_STREAM_TOKENS``) and s otherwise; two points at different B move f and s; a third point whose context
differs from the others' (share of its prior time spent on context at least ``MIN_CONTEXT_SHARE`` apart) moves
c too. The rest stay at the prior. Points that do not separate the terms they would move (two at the same B) fit
least squares on the identified subset and say so; so do points between which the estimate hardly changes
(less than ``FLAT_LOAD_SHARE`` of the step), which move f only. Two points that grow less between them than the
estimate's context part alone (so that holding c at the prior would need a negative s) move f and one scale of
everything that grows with the load, s = c, and say so: what grows with B and what grows with K rise together
between two points at one context per request, and two points cannot tell them apart. The fit is exact for as many
points as terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from hw_profile.errors import HwProfileError
from hw_profile.tables.step_table import StepTable, StepTimeGrid, table_meta

SINGLE_STREAM_TOKENS = 4
FAR_SCALE = 2.0  # a scale beyond this factor either way says more about the points or the estimate than the GPU
TERMS = {"f": "per-step cost", "s": "per-token cost", "c": "per-KV-token cost"}
MIN_CONTEXT_SHARE = 0.05
FLAT_LOAD_SHARE = 0.05  # below this change of the prior between points (share of the step), no per-token scale


@dataclass
class PriorFit:
    f_ms: float = 0.0
    s: float = 1.0
    c: float = 1.0
    fitted: list[str] = field(default_factory=list)
    residuals_pct: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def terms_in_words(self) -> str:
        """What was calibrated, in words: 'the per-step cost and the per-token cost'."""
        names = [f"the {TERMS[t]}" for t in self.fitted]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

    def far_from_prior(self) -> list[str]:
        """One warning per scale that moved more than ``FAR_SCALE`` times either way: a real GPU seldom differs
        from a fair estimate that much, while a point with its batch or KV tokens mistyped does."""
        lines = []
        for key in ("s", "c"):
            value = getattr(self, key)
            if key in self.fitted and not 1 / FAR_SCALE <= value <= FAR_SCALE:
                lines.append(f"the {TERMS[key]} moved x{value:.2f}, more than {FAR_SCALE:g}x from the estimate: "
                             "a point is probably wrong (its batch tokens, KV tokens or time) or the estimate is "
                             "far off for this deployment (its engine, dtype or parallelism); check the points "
                             "before planning on this table")
        return lines

    def moved(self, prior_fixed_ms: float) -> list[str]:
        """One line per term: how far it moved, or that it stayed at the prior."""
        lines = []
        if "f" in self.fitted:
            lines.append(f"per-step cost: {prior_fixed_ms:.3f} -> {prior_fixed_ms + self.f_ms:.3f} ms "
                         f"({self.f_ms:+.3f} ms)")
        else:
            lines.append(f"per-step cost: {prior_fixed_ms:.3f} ms (prior, not identified)")
        for key, label in (("s", "per-token cost"), ("c", "per-KV-token cost")):
            value = getattr(self, key)
            if key in self.fitted:
                lines.append(f"{label}: x{value:.3f} ({(value - 1) * 100:+.1f}%)")
            else:
                lines.append(f"{label}: x1 (prior, not identified)")
        return lines


def _basis(grid: StepTimeGrid, b: np.ndarray, k: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """T at one token, what the tokens add and what the context adds, on the table's own points: the CUDA-graph
    stairs are the engine's padding, not a cost to scale, so the calibrated table keeps them as they were."""
    grid = replace(grid, graphs=None)
    base = grid.step_ms(1, 0)
    at_b = grid.values(b, np.zeros_like(k))
    full = grid.values(b, k)
    return base, at_b - base, full - at_b


def fit_on_prior(prior: StepTable, b, k, ms) -> PriorFit:
    """The terms the points identify, fitted so the calibrated table passes through them (least squares beyond)."""
    b = np.asarray(b, dtype=float)
    k = np.asarray(k, dtype=float)
    ms = np.asarray(ms, dtype=float)
    if not 1 <= len(b) <= 3:
        raise HwProfileError(f"calibrate --prior: expected one to three points, got {len(b)}")
    if (b < 1).any() or (k < 0).any() or (ms <= 0).any():
        raise HwProfileError("calibrate --prior: points need batch tokens >= 1, KV tokens >= 0 and a positive time")
    grid = prior.grid
    base, load, context = _basis(grid, b, k)
    out = PriorFit()
    terms = ["f"] if len(b) == 1 and b[0] <= SINGLE_STREAM_TOKENS else ["s"] if len(b) == 1 else ["f", "s"]
    if len(b) >= 2 and np.ptp(b) == 0:
        terms = ["f"]
        out.notes.append("the points share one batch size: only the per-step cost is identified")
    if terms == ["f", "s"] and np.ptp(load) < FLAT_LOAD_SHARE * float(np.mean(ms)):
        # the prior barely changes between the points (a step bound by communication under overlap, say): their
        # difference says nothing about the price of a token there, and a scale fitted to it explodes
        terms = ["f"]
        out.notes.append("the estimate is flat between the points' batch sizes: only the per-step cost is "
                         "identified; add a point at a batch size where the estimate grows")
    share = context / np.maximum(base + load + context, 1e-12)
    if len(b) == 3 and np.ptp(share) >= MIN_CONTEXT_SHARE:
        terms = ["f", "s", "c"]
    elif len(b) == 3:
        out.notes.append("the points' contexts do not separate the per-KV-token cost: it stays at the prior")
    columns = {"f": np.ones_like(b), "s": load, "c": context}
    fixed = {"f": 0.0, "s": load, "c": context}
    target = ms - base - sum(fixed[t] for t in ("f", "s", "c") if t not in terms)
    a = np.column_stack([columns[t] for t in terms])
    sol, *_ = np.linalg.lstsq(a, target, rcond=None)
    values = dict(zip(terms, sol, strict=True))
    out.f_ms = float(values.get("f", 0.0))
    out.s = float(values.get("s", 1.0))
    out.c = float(values.get("c", 1.0))
    out.fitted = terms
    if terms == ["f", "s"] and out.s <= 0:
        (f_ms, scale), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(b), load + context]), ms - base,
                                            rcond=None)
        if scale > 0:
            out.f_ms, out.s, out.c = float(f_ms), float(scale), float(scale)
            out.fitted = ["f", "s", "c"]
            out.notes.append(f"the points grow less between them than the estimate's context part alone (holding "
                             f"the per-KV-token cost would need a per-token cost of x{float(sol[1]):.3f}): fitted "
                             "one scale for both, with the per-step cost; a third point at another context per "
                             "request separates them")
    if out.s <= 0 or out.c < 0:
        raise HwProfileError(f"calibrate --prior: the points imply a non-positive per-token cost (x{out.s:.3f}) or "
                             f"per-KV cost (x{out.c:.3f}); check the points' batch and KV tokens")
    if base + out.f_ms <= 0:
        raise HwProfileError(f"calibrate --prior: the points imply a negative per-step cost "
                             f"({base + out.f_ms:.3f} ms at B = 1)")
    pred = base + out.f_ms + out.s * load + out.c * context
    out.residuals_pct = [round(float(x), 3) for x in (pred / ms - 1) * 100]
    return out


def apply_fit(table: StepTable, fit: PriorFit, with_fixed: bool = True, name: str | None = None,
              meta: dict | None = None) -> StepTable:
    """``table`` with the fitted terms applied at each of its points (``with_fixed=False`` for a drafter's table:
    the per-step cost belongs to the target's step)."""
    pts = table.points.copy()
    ok = pts["status"] == "ok"
    b = pts.loc[ok, "batch_tokens"].to_numpy(float)
    k = pts.loc[ok, "kv_tokens"].to_numpy(float)
    base, load, context = _basis(table.grid, b, k)
    new = base + (fit.f_ms if with_fixed else 0.0) + fit.s * load + fit.c * context
    for col in ("step_ms", "step_ms_p10", "step_ms_p90"):
        pts.loc[ok, col] = new
    full = {**table.meta, **(meta or {})}
    full.update(table_meta(name=name or table.meta.get("name"), kind="calibrated-estimate",
                           prior=table.meta.get("name"), command=full.get("command")))
    full["caveat"] = {"kind": "a calibrated estimate",
                      "text": f"fitted {', '.join(fit.fitted)} on measured points; terms they do not identify stay at "
                              "the estimate"}
    return StepTable(points=pts, meta=full)

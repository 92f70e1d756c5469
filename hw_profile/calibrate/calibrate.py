"""Step times fitted to telemetry: the interpretable monotone T(B, K) behind ``hw-profile calibrate``.

Input is a set of observations, each a mean decode step of the deployed system: B verified tokens per step, K KV
tokens read per step (requests x mean context) and the step's duration (see ``hw_profile.calibrate.observations`` for how
dashboards, runs.csv and vLLM benchmark files become observations). The model is

    T(B, K) = a + b x B + c x K                                            (a, b, c >= 0)

a fixed per-step cost (kernel launches, weight reads a small batch cannot amortise, synchronisation, the expert
all-to-all's latency), a cost per verified token (matmuls, activations, communication volume) and a cost per KV
token read. It is fitted by least squares on relative error (every observation counts by its percentage miss, so
a 15 ms step and a 60 ms step weigh alike), with the non-negativity enforced by refitting without any coefficient
that comes out negative.

**What one curve cannot say.** A dashboard of one system at one workload has B = R x budget and K = R x context, both
proportional to the concurrency R: b and c are then not separately identifiable (the design is collinear). The
per-KV-token cost is then taken as given (``kv_ns_per_token``, e.g. from the roofline's KV bytes over the GPU's
bandwidth) and only a and b are fitted; observations at several contexts or budgets identify c themselves.

**The deployed drafter.** The observed step includes the drafting of the system in service. With
``draft_layers`` and ``layers`` set, that drafter is taken to be ``draft_layers`` layers of the target's kind run on
one token per request per step (DeepSeek's MTP module), costing draft_layers / layers of the target's per-step,
per-token and per-KV-token costs, so the fit is of the target alone: T_obs = (1 + f) a + b (B + f R) + c (K + f K_d)
with f = draft_layers / layers and K_d the drafter's KV reads (capped by ``draft_window`` tokens per request).

**Isotonic where data are dense.** With many observations over many batch sizes (per-step telemetry), the B-shape
is taken from the data instead: g(B) = isotonic (non-decreasing) regression of T - c K on B, so that real steps
(wave quantisation, expert-touching thresholds) survive; c comes from the linear fit.

**Extrapolation.** Inside the observed B range the table follows the fit (linear, or the isotonic g). Below it, it
continues down to B = 1 with the linear fit's slope b (for the isotonic form, from the first isotonic value).
Above it, time grows with the linear fit's slope b, so a calibrated table never
claims that larger batches get cheaper per token than observed; the table's own lookup then extrapolates linearly
beyond its last point. K extrapolates linearly with c. The sidecar records the observed ranges, so a reader can
see where the table is measured and where it is assumed.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from hw_profile.errors import HwProfileError
from hw_profile.kernels.roofline import default_b_axis, default_k_axis
from hw_profile.tables.step_table import StepTable, table_meta

PARAMS = ("fixed_ms", "ms_per_token", "ms_per_kv_token")


@dataclass(frozen=True)
class DraftShare:
    """The deployed system's drafter, as a share of the target (see the module docstring)."""

    draft_layers: float = 0.0  # layer-equivalents of the target (may be fractional: a head counts too)
    layers: int = 0
    draft_window: int = 0  # KV tokens per request the drafter reads (0: all of them)

    @property
    def fraction(self) -> float:
        return self.draft_layers / self.layers if self.draft_layers and self.layers else 0.0


@dataclass
class Calibration:
    """The fitted model, its uncertainty and residuals, and the optional isotonic B-shape."""

    fixed_ms: float
    ms_per_token: float
    ms_per_kv_token: float
    stderr: dict[str, float]
    fitted: list[str]  # which coefficients the data determined (others fixed or clamped at zero)
    form: str  # "linear" or "isotonic"
    residual_pct: np.ndarray  # (N,) 100 x (model - observed) / observed, for the observed total step
    observed: pd.DataFrame
    draft: DraftShare = field(default_factory=DraftShare)
    iso_b: np.ndarray | None = None  # knots of g(B) (isotonic form)
    iso_ms: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)

    def target_ms(self, batch_tokens: np.ndarray | float, kv_tokens: np.ndarray | float) -> np.ndarray:
        """The target's step time T(B, K) (drafter share removed), elementwise."""
        b = np.asarray(batch_tokens, dtype=float)
        k = np.asarray(kv_tokens, dtype=float)
        if self.form == "isotonic" and self.iso_b is not None:
            lo, hi = self.iso_b[0], self.iso_b[-1]
            inside = np.interp(b, self.iso_b, self.iso_ms)
            below = np.maximum(self.iso_ms[0] - self.ms_per_token * (lo - b), 1e-6)
            above = self.iso_ms[-1] + self.ms_per_token * (b - hi)
            per_b = np.where(b < lo, below, np.where(b > hi, above, inside))
        else:
            per_b = self.fixed_ms + self.ms_per_token * b
        return per_b + self.ms_per_kv_token * k

    def summary(self) -> dict:
        obs = self.observed
        res = self.residual_pct
        return {
            "form": self.form,
            "parameters": {
                "fixed_ms": self.fixed_ms,
                "us_per_token": self.ms_per_token * 1e3,
                "ns_per_kv_token": self.ms_per_kv_token * 1e6,
            },
            "stderr": {
                "fixed_ms": self.stderr.get("fixed_ms", 0.0),
                "us_per_token": self.stderr.get("ms_per_token", 0.0) * 1e3,
                "ns_per_kv_token": self.stderr.get("ms_per_kv_token", 0.0) * 1e6,
            },
            "fitted": self.fitted,
            "draft_share": asdict(self.draft),
            "observed_range": {
                "batch_tokens": [float(obs["batch_tokens"].min()), float(obs["batch_tokens"].max())],
                "kv_tokens": [float(obs["kv_tokens"].min()), float(obs["kv_tokens"].max())],
                "step_ms": [float(obs["step_ms"].min()), float(obs["step_ms"].max())],
            },
            "residuals_pct": {
                "rms": float(np.sqrt(np.mean(res**2))),
                "max_abs": float(np.max(np.abs(res))),
                "per_observation": [round(float(r), 3) for r in res],
            },
            "notes": self.notes,
        }


def _design(obs: pd.DataFrame, draft: DraftShare) -> np.ndarray:
    """Columns multiplying (a, b, c) in the observed total step time."""
    f = draft.fraction
    b = obs["batch_tokens"].to_numpy(float)
    k = obs["kv_tokens"].to_numpy(float)
    r = obs["requests"].to_numpy(float)
    k_draft = np.minimum(k, r * draft.draft_window) if draft.draft_window else k
    return np.column_stack([np.full_like(b, 1.0 + f), b + f * r, k + f * k_draft])


def _nonneg_wls(x: np.ndarray, y: np.ndarray, w: np.ndarray, free: list[int]) -> tuple[np.ndarray, list[int]]:
    """Weighted least squares over the columns ``free`` with every coefficient >= 0: the best of the fits over all
    subsets of ``free`` whose unconstrained solution is non-negative (three columns: at most seven fits)."""
    best, best_cols, best_err = np.zeros(x.shape[1]), [], float(np.sum(w * y**2))
    sw = np.sqrt(w)
    for n in range(len(free), 0, -1):
        for cols in itertools.combinations(free, n):
            sub = x[:, cols] * sw[:, None]
            coef, *_ = np.linalg.lstsq(sub, y * sw, rcond=None)
            if np.any(coef < 0):
                continue
            err = float(np.sum((sub @ coef - y * sw) ** 2))
            if err < best_err - 1e-15:
                best = np.zeros(x.shape[1])
                best[list(cols)] = coef
                best_cols, best_err = list(cols), err
    return best, best_cols


def _collinear(x: np.ndarray, cols: tuple[int, int]) -> bool:
    """True when two columns are proportional over the observations (correlation of their ratio is ~constant)."""
    u, v = x[:, cols[0]], x[:, cols[1]]
    if np.allclose(v, 0.0):
        return False
    ratio = v / np.maximum(u, 1e-12)
    return bool(np.std(ratio) <= 0.02 * max(abs(np.mean(ratio)), 1e-12))


def pav(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Isotonic (non-decreasing) weighted regression of y on x by pool-adjacent-violators, one value per distinct
    x: returns (distinct x ascending, fitted values)."""
    order = np.argsort(x, kind="stable")
    xs, ys, ws = x[order], y[order], w[order]
    ux, inv = np.unique(xs, return_inverse=True)
    wsum = np.bincount(inv, weights=ws)
    ymean = np.bincount(inv, weights=ws * ys) / wsum
    vals, wts, sizes = [], [], []
    for v, wt in zip(ymean, wsum, strict=True):
        vals.append(v)
        wts.append(wt)
        sizes.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            wt2 = wts[-2] + wts[-1]
            v2 = (vals[-2] * wts[-2] + vals[-1] * wts[-1]) / wt2
            n2 = sizes[-2] + sizes[-1]
            del vals[-1], wts[-1], sizes[-1]
            vals[-1], wts[-1], sizes[-1] = v2, wt2, n2
    return ux, np.repeat(vals, sizes)


def is_dense(obs: pd.DataFrame) -> bool:
    """Enough data to trust a free B-shape: at least 50 observations over at least 10 distinct batch sizes."""
    return len(obs) >= 50 and obs["batch_tokens"].nunique() >= 10


def fit(obs: pd.DataFrame, kv_ns_per_token: float | None = None, draft: DraftShare = DraftShare(),
        form: str = "auto") -> Calibration:
    """Fit T(B, K) to observations (columns batch_tokens, kv_tokens, requests, step_ms, optional weight)."""
    if form not in ("auto", "linear", "isotonic"):
        raise HwProfileError(f"--form: expected auto, linear or isotonic, got {form!r}")
    if len(obs) < 2:
        raise HwProfileError(f"telemetry: expected at least 2 observations to fit a step time, got {len(obs)}")
    y = obs["step_ms"].to_numpy(float)
    w = obs["weight"].to_numpy(float) if "weight" in obs else np.ones_like(y)
    w = w / y**2  # relative error
    x = _design(obs, draft)
    notes: list[str] = []
    free = [0, 1, 2]
    fixed_c = None
    if kv_ns_per_token is not None:
        fixed_c = kv_ns_per_token * 1e-6
        notes.append(f"per-KV-token cost given ({kv_ns_per_token:g} ns), not fitted")
    elif np.allclose(x[:, 2], 0.0):
        fixed_c = 0.0
        notes.append("no KV tokens in the telemetry: per-KV-token cost 0")
    elif _collinear(x, (1, 2)):
        fixed_c = 0.0
        notes.append("B and K are proportional in the telemetry (one context, one budget): the per-KV-token cost "
                     "cannot be told from the per-token cost; it is 0 and the per-token cost carries both (give "
                     "--kv-ns-per-token to split them)")
    if fixed_c is not None:
        free = [0, 1]
        y_fit = y - fixed_c * x[:, 2]
    else:
        y_fit = y
    coef, used = _nonneg_wls(x, y_fit, w, free)
    if fixed_c is not None:
        coef[2] = fixed_c
    dropped = [PARAMS[i] for i in free if i not in used]
    if dropped:
        notes.append(f"clamped at 0 (the unconstrained fit made them negative): {', '.join(dropped)}")
    model = x @ coef
    stderr = _stderr(x, y, w, coef, used)
    cal = Calibration(
        fixed_ms=float(coef[0]), ms_per_token=float(coef[1]), ms_per_kv_token=float(coef[2]), stderr=stderr,
        fitted=[PARAMS[i] for i in used], form="linear", residual_pct=100.0 * (model - y) / y,
        observed=obs.reset_index(drop=True), draft=draft, notes=notes,
    )
    if form == "isotonic" or (form == "auto" and is_dense(obs)):
        _isotonic(cal, x, y, w)
    return cal


def _stderr(x: np.ndarray, y: np.ndarray, w: np.ndarray, coef: np.ndarray, used: list[int]) -> dict[str, float]:
    """Standard errors of the fitted coefficients: sigma^2 (X'WX)^-1 with sigma^2 the weighted residual variance
    (zero for coefficients that were fixed or clamped; infinite when too few observations remain)."""
    out = {p: 0.0 for p in PARAMS}
    if not used:
        return out
    dof = len(y) - len(used)
    xs = x[:, used]
    resid = y - x @ coef
    if dof <= 0:
        return {**out, **{PARAMS[i]: math.inf for i in used}}
    sigma2 = float(np.sum(w * resid**2) / dof)
    cov = np.linalg.pinv(xs.T @ (xs * w[:, None])) * sigma2
    for j, i in enumerate(used):
        out[PARAMS[i]] = float(np.sqrt(max(cov[j, j], 0.0)))
    return out


def _isotonic(cal: Calibration, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> None:
    """Replace a + b B by an isotonic g(B) of the target's part, keeping c (and the drafter share's scaling)."""
    f = cal.draft.fraction
    b = cal.observed["batch_tokens"].to_numpy(float)
    kv_part = cal.ms_per_kv_token * x[:, 2]
    # with a drafter share, g(B) (1 + f) approximates (1 + f) a + b (B + f R): R ~ B / budget varies little
    target = (y - kv_part) / (1.0 + f) if f else y - kv_part
    ux, g = pav(b, target, w * y**2)  # plain weights: the residual scale is already per observation
    cal.iso_b, cal.iso_ms = ux, g
    cal.form = "isotonic"
    model = cal.target_ms(b, 0.0) * (1.0 + f) + kv_part if f else cal.target_ms(b, 0.0) + kv_part
    cal.residual_pct = 100.0 * (model - y) / y


def calibrated_table(cal: Calibration, name: str | None = None, inputs: dict | None = None,
                     max_batch_tokens: int | None = None, max_kv_tokens: int | None = None,
                     meta: dict | None = None) -> StepTable:
    """The fitted T(B, K) on a grid in the standard table format, with a ``kind: calibrated`` sidecar."""
    obs = cal.observed
    b_hi = max_batch_tokens or int(max(16384, 4 * obs["batch_tokens"].max()))
    k_hi = max_kv_tokens or int(max(4_194_304, 4 * obs["kv_tokens"].max()))
    b_axis = default_b_axis(b_hi)
    if cal.iso_b is not None:
        b_axis = np.union1d(b_axis, np.round(cal.iso_b).astype(int))
    k_axis = default_k_axis(k_hi)
    bb, kk = np.meshgrid(b_axis, k_axis)
    ms = cal.target_ms(bb.ravel(), kk.ravel())
    rows = {"batch_tokens": bb.ravel(), "kv_tokens": kk.ravel(), "status": "ok", "step_ms": ms,
            "step_ms_p10": ms, "step_ms_p90": ms, "repeats": 0, "throttled": False}
    fields = dict(meta or {})
    fields.update(name=name, kind="calibrated", calibration=cal.summary(), inputs=inputs or {})
    return StepTable.from_points(rows, table_meta(**fields))

"""Step-time tables: T(B, K), the time of one target (or drafter) forward over B new tokens that read K KV tokens.

A table is a CSV with the columns of ``COLUMNS`` and a JSON sidecar ``TABLE.json`` holding its metadata (device,
driver, dtype, model shape, command line...). Rows with ``status`` other than ``ok`` record points that were
skipped (out of memory, say) and are kept for the record but never used for lookups.

Lookup (``StepTimeGrid``) is piecewise linear in B and in K over the table's own points. Measured tables are not
rectangular in (B, K) (a profiler sweeps requests x tokens-per-request x context, so each K holds its own range of
B); the grid is made rectangular once at load:

1. cells between two measured B of the same K row are interpolated linearly in B;
2. cells beyond the measured B range of their row continue from the row's outermost point along the B-shape of
   the whole table, an additive model T ~ f(B) + g(K) fitted by least squares to the measured cells (weights and
   activations scale with B, KV reads with K, which is why the two add).

Beyond the table, B and K extrapolate linearly from the last segment (slope clamped at zero, so time never falls
as work grows) and clamp below the first point.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from hw_profile.errors import HwProfileError
from hw_profile.files import atomic_write, atomic_write_text

COLUMNS = [
    "batch_tokens",
    "kv_tokens",
    "requests",
    "context",
    "status",
    "step_ms",
    "step_ms_p10",
    "step_ms_p90",
    "repeats",
    "throttled",
    "throttle_reasons",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "power_w",
    "temp_c",
    "util_pct",
    "energy_j",
]
REQUIRED = ["batch_tokens", "kv_tokens", "status", "step_ms"]


class TableError(HwProfileError):
    """A table file that cannot be used; the message names the file and what is wrong."""


def sidecar_path(csv_path: str | Path) -> Path:
    p = Path(csv_path)
    return p.with_suffix(".json")


@dataclass
class StepTable:
    """The rows of a step-time table and its metadata."""

    points: pd.DataFrame
    meta: dict = field(default_factory=dict)
    path: Path | None = None

    @classmethod
    def from_points(cls, rows: list[dict] | pd.DataFrame, meta: dict | None = None) -> StepTable:
        df = pd.DataFrame(rows)
        for col in COLUMNS:
            if col not in df.columns:
                df[col] = np.nan if col not in ("status", "throttle_reasons") else ""
        df["status"] = df["status"].replace("", "ok").fillna("ok")
        return cls(points=df[COLUMNS].copy(), meta=dict(meta or {}))

    @classmethod
    def read(cls, path: str | Path) -> StepTable:
        path = Path(path)
        if not path.is_file():
            raise TableError(f"{path}: step-time table not found")
        try:
            df = pd.read_csv(path, keep_default_na=True)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise TableError(f"{path}: not a readable CSV table ({exc})") from None
        missing = [c for c in REQUIRED if c not in df.columns]
        if missing:
            raise TableError(f"{path}: missing column(s) {', '.join(missing)}; a step-time table needs {', '.join(REQUIRED)}")
        for col in COLUMNS:
            if col not in df.columns:
                df[col] = np.nan
        df["status"] = df["status"].fillna("ok").astype(str)
        reasons = df["throttle_reasons"].astype(object)  # an all-empty column reads as float NaN
        df["throttle_reasons"] = reasons.where(reasons.notna(), "").astype(str)
        ok = df["status"] == "ok"
        for col in ("batch_tokens", "kv_tokens", "step_ms"):
            vals = pd.to_numeric(df.loc[ok, col], errors="coerce")
            bad = vals.isna() | (vals < 0) | ((vals <= 0) if col != "kv_tokens" else False)
            if bad.any():
                row = int(bad[bad].index[0]) + 2  # +1 header, +1 one-based
                raise TableError(f"{path}: line {row}: column {col} must be a positive number, got {df.loc[bad[bad].index[0], col]!r}")
        if ok.sum() == 0:
            raise TableError(f"{path}: no row with status 'ok'")
        meta = {}
        side = sidecar_path(path)
        if side.is_file():
            try:
                meta = json.loads(side.read_text())
            except json.JSONDecodeError as exc:
                raise TableError(f"{side}: sidecar is not valid JSON ({exc})") from None
        return cls(points=df[COLUMNS].copy(), meta=meta, path=path)

    def write(self, path: str | Path) -> Path:
        """Write the CSV and its JSON sidecar, each atomically."""
        path = Path(path)
        atomic_write(path, lambda tmp: self.points[COLUMNS].to_csv(tmp, index=False, float_format="%.6g"))
        atomic_write_text(sidecar_path(path), json.dumps(self.meta, indent=2, sort_keys=True) + "\n")
        self.path = path
        return path

    @property
    def ok(self) -> pd.DataFrame:
        return self.points[self.points["status"] == "ok"]

    @cached_property
    def grid(self) -> StepTimeGrid:
        ok = self.ok
        return StepTimeGrid.from_points(
            ok["batch_tokens"].to_numpy(float), ok["kv_tokens"].to_numpy(float), ok["step_ms"].to_numpy(float)
        )

    @cached_property
    def energy_grid(self) -> StepTimeGrid | None:
        """Joules per step over (B, K), where the table records energy."""
        ok = self.ok
        e = pd.to_numeric(ok["energy_j"], errors="coerce")
        if e.isna().all():
            return None
        keep = e.notna().to_numpy()
        return StepTimeGrid.from_points(
            ok["batch_tokens"].to_numpy(float)[keep], ok["kv_tokens"].to_numpy(float)[keep], e.to_numpy(float)[keep]
        )

    def label(self) -> str:
        return str(self.meta.get("name") or (self.path.stem if self.path else "table"))


@dataclass(frozen=True)
class StepTimeGrid:
    """A rectangular grid ms[k, b] of step times over ascending axes b_axis (tokens) and k_axis (KV tokens)."""

    b_axis: np.ndarray
    k_axis: np.ndarray
    ms: np.ndarray

    @classmethod
    def from_points(cls, b: np.ndarray, k: np.ndarray, t: np.ndarray) -> StepTimeGrid:
        b_axis, ib = np.unique(b, return_inverse=True)
        k_axis, ik = np.unique(k, return_inverse=True)
        total = np.zeros((len(k_axis), len(b_axis)))
        count = np.zeros_like(total)
        np.add.at(total, (ik, ib), t)
        np.add.at(count, (ik, ib), 1)
        with np.errstate(invalid="ignore"):
            ms = total / count  # duplicates (same B and K from different shapes) are averaged
        if np.isnan(ms).any():
            ms = _fill_missing(b_axis, ms)
        return cls(b_axis=b_axis, k_axis=k_axis, ms=ms)

    def row(self, kv_tokens: float) -> np.ndarray:
        """Step times over b_axis at one K (linear in K between rows)."""
        k = self.k_axis
        if len(k) == 1 or kv_tokens <= k[0]:
            return self.ms[0]
        j = min(int(np.searchsorted(k, kv_tokens)), len(k) - 1)
        j = max(j, 1)
        w = (kv_tokens - k[j - 1]) / (k[j] - k[j - 1])
        lo, hi = self.ms[j - 1], self.ms[j]
        if w > 1.0:  # beyond the last row: extrapolate, never downwards
            return hi + np.maximum(hi - lo, 0.0) * (w - 1.0)
        return lo + (hi - lo) * w

    def curve(self, kv_tokens: float) -> StepCurve:
        return StepCurve(self.b_axis, self.row(kv_tokens))

    def step_ms(self, batch_tokens: float, kv_tokens: float) -> float:
        return float(self.curve(kv_tokens)(np.asarray(batch_tokens, dtype=float)))


@dataclass(frozen=True)
class StepCurve:
    """Step time as a function of B at fixed K: piecewise linear, extrapolated linearly beyond the last B."""

    b_axis: np.ndarray
    ms: np.ndarray

    def __call__(self, batch_tokens: np.ndarray | float) -> np.ndarray:
        b = np.asarray(batch_tokens, dtype=float)
        out = np.interp(b, self.b_axis, self.ms)
        if len(self.b_axis) > 1:
            b_last = self.b_axis[-1]
            slope = max((self.ms[-1] - self.ms[-2]) / (b_last - self.b_axis[-2]), 0.0)
            out = np.where(b > b_last, self.ms[-1] + slope * (b - b_last), out)
        return out


def _fill_missing(b_axis: np.ndarray, ms: np.ndarray) -> np.ndarray:
    """Fill the NaN cells of ms[k, b] (see the module docstring)."""
    ms = ms.copy()
    known = ~np.isnan(ms)
    # 1. interior: linear in B between measured points of the same row
    for j in range(ms.shape[0]):
        cols = np.flatnonzero(known[j])
        if len(cols) >= 2:
            inside = np.arange(cols[0], cols[-1] + 1)
            ms[j, inside] = np.interp(b_axis[inside], b_axis[cols], ms[j, cols])
    # 2. row ends: continue along f(B) of the additive fit T ~ f(B) + g(K)
    kj, bi = np.nonzero(known)
    nb, nk = ms.shape[1], ms.shape[0]
    design = np.zeros((len(kj), nb + nk))
    design[np.arange(len(kj)), bi] = 1.0
    design[np.arange(len(kj)), nb + kj] = 1.0
    coef, *_ = np.linalg.lstsq(design, ms[kj, bi], rcond=None)
    f = coef[:nb]
    for j in range(nk):
        have = np.flatnonzero(~np.isnan(ms[j]))
        first, last = have[0], have[-1]
        ms[j, last + 1 :] = ms[j, last] + np.maximum(f[last + 1 :] - f[last], 0.0)
        ms[j, :first] = np.maximum(ms[j, first] + np.minimum(f[:first] - f[first], 0.0), 1e-6)
    return ms


def table_meta(**fields) -> dict:
    """Metadata common to every table, plus the caller's fields (None values dropped)."""
    import datetime
    import platform
    import sys

    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": sys.version.split()[0],
        "command": " ".join(sys.argv),
    }
    meta.update({k: v for k, v in fields.items() if v is not None and not (isinstance(v, float) and math.isnan(v))})
    return meta

"""A monotone copy of a step-time table (``hw-profile fit``): T non-decreasing in B and in K.

Measured tables are jagged: noise, and real steps (wave quantisation, kernel switches). The simulator's engine clock
always uses the raw table; a policy may be given a smooth one, since a greedy that stops at the first drop of
Theta = tau x SPS(B) stops early on a spurious bump.

Method: the table is rectangularised as the lookup does it (``StepTimeGrid``), then projected onto the set of
grids that are non-decreasing along B (each row) and along K (each column), in the least-squares sense weighted by
how many measured points each cell holds (cells the rectangularisation filled in get a small weight, so they
follow the measurements instead of pulling on them). The projection onto the intersection of the two monotone
cones is Dykstra's alternating algorithm over row-wise and column-wise isotonic regressions (pool-adjacent-
violators); a final running maximum along both axes removes the last rounding-size violations.

The smooth table holds every cell of the grid (so its own lookup needs no filling and is monotone throughout);
cells with a measured point keep that point's requests, context, repeats and telemetry, with p10/p90 shifted by the
same amount as the median; skipped rows are carried over for the record.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hw_profile.tables.step_table import COLUMNS, StepTable

FILLED_WEIGHT = 1e-3  # weight of a cell the rectangularisation filled in, relative to one measured point


def isotonic(y: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Weighted least-squares non-decreasing fit of a 1-D sequence (pool adjacent violators)."""
    y = np.asarray(y, dtype=float)
    w = np.ones_like(y) if w is None else np.asarray(w, dtype=float)
    means: list[float] = []
    weights: list[float] = []
    sizes: list[int] = []
    for yi, wi in zip(y, w, strict=True):
        means.append(yi)
        weights.append(wi)
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            m2, w2, n2 = means.pop(), weights.pop(), sizes.pop()
            tw = weights[-1] + w2
            means[-1] = (means[-1] * weights[-1] + m2 * w2) / tw
            weights[-1] = tw
            sizes[-1] += n2
    return np.repeat(means, sizes)


def monotone_grid(ms: np.ndarray, weights: np.ndarray | None = None, max_iter: int = 500,
                  tol: float = 1e-10) -> np.ndarray:
    """The weighted least-squares grid closest to ms[k, b] that is non-decreasing along both axes."""
    y = np.asarray(ms, dtype=float)
    w = np.ones_like(y) if weights is None else np.asarray(weights, dtype=float)
    scale = max(float(np.abs(y).max()), 1e-12)
    x = y.copy()
    p = np.zeros_like(y)
    q = np.zeros_like(y)
    for _ in range(max_iter):
        z = _rows(x + p, w)
        p = x + p - z
        x_new = _rows((z + q).T, w.T).T
        q = z + q - x_new
        done = np.max(np.abs(x_new - x)) < tol * scale and np.max(np.abs(z - x_new)) < tol * scale
        x = x_new
        if done:
            break
    return np.maximum.accumulate(np.maximum.accumulate(x, axis=1), axis=0)


def _rows(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.vstack([isotonic(a[i], w[i]) for i in range(a.shape[0])])


def smooth_path(path: str | Path) -> Path:
    """TABLE.csv -> TABLE.smooth.csv (its sidecar TABLE.smooth.json)."""
    p = Path(path)
    return p.with_name(p.stem + ".smooth.csv")


def smooth_table(table: StepTable) -> StepTable:
    ok = table.ok.copy()
    grid = table.grid
    b_index = np.searchsorted(grid.b_axis, ok["batch_tokens"].to_numpy(float))
    k_index = np.searchsorted(grid.k_axis, ok["kv_tokens"].to_numpy(float))
    counts = np.zeros_like(grid.ms)
    np.add.at(counts, (k_index, b_index), 1.0)
    weights = np.where(counts > 0, counts, FILLED_WEIGHT)
    fitted = monotone_grid(grid.ms, weights)

    kk, bb = np.meshgrid(np.arange(len(grid.k_axis)), np.arange(len(grid.b_axis)), indexing="ij")
    cells = pd.DataFrame({
        "batch_tokens": grid.b_axis[bb.ravel()],
        "kv_tokens": grid.k_axis[kk.ravel()],
        "status": "ok",
        "step_ms": fitted.ravel(),
        "step_ms_p10": fitted.ravel(),
        "step_ms_p90": fitted.ravel(),
        "repeats": 0,
    })
    cells["throttled"] = pd.Series([False] * len(cells), dtype=object)
    cells["throttle_reasons"] = ""
    for col in COLUMNS:
        if col not in cells:
            cells[col] = np.nan
    cells = cells.astype({"repeats": float})
    # measured cells: carry the point's own columns (the first point where several share a cell)
    ok = ok.assign(_cell=k_index * len(grid.b_axis) + b_index).drop_duplicates("_cell")
    # the point's own spread around its own median, moved to the fitted value
    shift = fitted.ravel()[ok["_cell"].to_numpy()] - ok["step_ms"].to_numpy(float)
    carried = ok.set_index("_cell")
    for col in COLUMNS:
        if col in ("batch_tokens", "kv_tokens", "status", "step_ms"):
            continue
        values = carried[col]
        if col in ("step_ms_p10", "step_ms_p90"):
            values = pd.to_numeric(values, errors="coerce") + shift
        cells.loc[carried.index, col] = values.to_numpy()
    skipped = table.points[table.points["status"] != "ok"]
    rows = pd.concat([cells, skipped], ignore_index=True) if len(skipped) else cells
    change = np.abs(fitted - grid.ms)[counts > 0] / grid.ms[counts > 0]
    meta = dict(table.meta)
    # the sidecar says what this table is: a fit, not a measurement, and not what the source's command wrote
    meta["kind"] = "smoothed"
    for key in ("command", "note"):
        meta.pop(key, None)
    meta["smoothed"] = {
        "from": table.path.name if table.path is not None else None,
        "from_kind": table.meta.get("kind"),
        "from_command": table.meta.get("command"),
        "from_note": table.meta.get("note"),
        "method": "weighted least-squares projection onto grids non-decreasing in B and K "
                  "(Dykstra over row/column isotonic regressions)",
        "cells": int(fitted.size),
        "measured_cells": int((counts > 0).sum()),
        "filled_cell_weight": FILLED_WEIGHT,
        "max_change_pct_measured": round(float(change.max() * 100.0), 3) if change.size else 0.0,
        "mean_change_pct_measured": round(float(change.mean() * 100.0), 3) if change.size else 0.0,
    }
    if "name" in meta:
        meta["name"] = f"{meta['name']} (smooth)"
    return StepTable.from_points(rows, meta)


def fit_file(path: str | Path, out: str | Path | None = None, command: str | None = None) -> tuple[StepTable, Path]:
    table = StepTable.read(path)
    smooth = smooth_table(table)
    if command:
        smooth.meta["command"] = command
    target = Path(out) if out is not None else smooth_path(path)
    smooth.write(target)
    return smooth, target

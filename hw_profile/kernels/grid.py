"""A measured table on a rectangular grid, read at any point: multilinear inside, linear extrapolation outside.

The kernel database measures each kernel on a grid of a few axes (GEMM: M, N, K; decode attention: batch, KV
length; all-reduce: message size). ``Grid`` holds one such table as a dense array over the sorted axis values and
answers, per query point, the value and whether the point lay inside measured data.

Interpolation is linear in the raw coordinates and linear in the value, along every axis (multilinear). That is
exact for the two shapes kernel times take: affine in one size (attention in KV length, a GEMM in M once compute
bound) and a product of two sizes (a memory-bound GEMM's time grows as N x K, which bilinear interpolation
reproduces). Log-space interpolation would bend both. Outside an axis's measured range the same formula with the
last two measured points continues the line (linear extrapolation), and the point is reported not ``inside``;
below the first measured point the first value is held (a kernel's time has a floor at small sizes), also not
``inside``. Every axis of these tables is a size (tokens, batch, KV length, heads, bytes), so past the edge a
kernel is never faster than at the edge: where the last two points slope down (a kernel switching its tiling, or
noise), the edge's value is held rather than the line continued toward zero.

A grid cell that was not measured (the collector skipped a combination, or stopped where batch x KV ran out of
memory) is filled from its neighbours along the last axis (then the others), by the same lines; a query that leans
on a filled cell is also reported not ``inside``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Grid:
    axes: tuple[np.ndarray, ...]  # sorted, distinct values per axis
    values: np.ndarray  # shape = lengths of the axes
    measured: np.ndarray  # bool, same shape: False where the cell was filled, not measured

    @classmethod
    def from_frame(cls, df: pd.DataFrame, axes: list[str], value: str = "latency") -> Grid:
        """A grid from rows with one column per axis and a value column; duplicate points are averaged."""
        if df.empty:
            raise ValueError("no rows to build a grid from")
        mean = df.groupby(axes, sort=True)[value].mean()
        axis_values = tuple(np.asarray(sorted(df[a].unique()), dtype=float) for a in axes)
        values = np.full([len(a) for a in axis_values], np.nan)
        index = tuple(np.searchsorted(ax, np.asarray(mean.index.get_level_values(i), dtype=float))
                      for i, ax in enumerate(axis_values))
        values[index] = mean.to_numpy(dtype=float)
        measured = np.isfinite(values)
        return cls(axis_values, _fill(values, axis_values), measured)

    def replace(self, values: np.ndarray) -> Grid:
        return Grid(self.axes, values, self.measured)

    def lookup(self, *coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values at the points (one array per axis, broadcast together) and whether each lay inside measured
        data (every axis within its measured range, no filled cell used)."""
        if len(coords) != len(self.axes):
            raise ValueError(f"grid has {len(self.axes)} axes, got {len(coords)} coordinates")
        pts = np.broadcast_arrays(*[np.asarray(c, dtype=float) for c in coords])
        lo_idx, weights, inside = [], [], np.ones(pts[0].shape, dtype=bool)
        for ax, x in zip(self.axes, pts, strict=True):
            if len(ax) == 1:
                lo_idx.append(np.zeros(x.shape, dtype=int))
                weights.append(np.zeros(x.shape))
                inside &= x == ax[0]
                continue
            i = np.clip(np.searchsorted(ax, x, side="right") - 1, 0, len(ax) - 2)
            lo_idx.append(i)
            # below the first measured size the first time is held (kernel times have a floor at small sizes;
            # a line continued down would run toward zero), above the last the line continues
            weights.append(np.where(x < ax[0], 0.0, (x - ax[i]) / (ax[i + 1] - ax[i])))
            inside &= (x >= ax[0]) & (x <= ax[-1])
        out = np.zeros(pts[0].shape)
        d = len(self.axes)
        for corner in range(1 << d):
            w = np.ones(pts[0].shape)
            idx = []
            for a in range(d):
                hi = (corner >> a) & 1
                if len(self.axes[a]) == 1 and hi:
                    w = np.zeros(pts[0].shape)
                    idx.append(lo_idx[a])
                    continue
                w = w * (weights[a] if hi else 1.0 - weights[a])
                idx.append(lo_idx[a] + hi)
            used = tuple(idx)
            out = out + w * self.values[used]
            inside &= (w == 0.0) | self.measured[used]
        out = np.asarray(out, dtype=float)  # an array even for one point, so the points past an edge can be set
        for a, (ax, x) in enumerate(zip(self.axes, pts, strict=True)):
            beyond = x > ax[-1]
            if beyond.any():  # never below the value at the edge of an axis the point lies past (only those points)
                edge, _ = self.lookup(*(np.full(int(beyond.sum()), ax[-1]) if i == a else p[beyond]
                                        for i, p in enumerate(pts)))
                out[beyond] = np.maximum(out[beyond], edge)
        return np.maximum(out, 0.0), inside


def _fill(values: np.ndarray, axes: tuple[np.ndarray, ...]) -> np.ndarray:
    """Unmeasured cells filled along the last axis first (KV length for attention, whose measured region is a
    triangle: the collector stops where batch x KV no longer fits), then the others, wherever the line holds two
    measured cells: linear between measured neighbours, and past the last one the line through the last two
    continued, as ``lookup`` does."""
    out = values.copy()
    for min_points in (2, 1):  # lines first, then holding a lone value where no axis offers two
        for a in reversed(range(len(axes))):
            if not np.isnan(out).any():
                return np.maximum(out, 0.0)
            ax = axes[a]
            moved = np.moveaxis(out, a, -1).copy()
            flat = moved.reshape(-1, moved.shape[-1])
            for row in flat:
                ok = np.isfinite(row)
                if ok.all() or ok.sum() < min_points:
                    continue
                row[~ok] = _line(ax[ok], row[ok], ax[~ok]) if ok.sum() >= 2 else row[ok][0]
            out = np.moveaxis(flat.reshape(moved.shape), -1, a)
    if np.isnan(out).any():
        out = np.where(np.isnan(out), np.nanmean(out), out)
    return np.maximum(out, 0.0)


def _line(x: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Piecewise-linear through (x, y), continued past both ends by the end segments."""
    i = np.clip(np.searchsorted(x, at, side="right") - 1, 0, len(x) - 2)
    return y[i] + (at - x[i]) * (y[i + 1] - y[i]) / (x[i + 1] - x[i])

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

A sidecar may also price the attention of prompt chunks (``ChunkAttention``, the optional block ``prefill_cost``):
a chunk's GEMMs are T's at the step's total tokens (one forward, ``simulator.core.forward``), but its causal
attention grows with the chunk and with the prompt cached before it, which T's (B, K) axes do not see.

And it may say how the table priced verification's attention (``VerifyAttention``, the optional block
``verify_attention``): T's axes are tokens and KV tokens, not requests, yet each verified token attends to its
request's whole context, so the attention's compute is (tokens per request) x K. A table is priced at one number
of tokens per request; a step that verifies more or fewer per request is corrected by the difference
(``StepTimeGrid.verify_ms``), which the engine's clock and the policies' SPS both add.

An estimated table also records the serving engine's captured CUDA graphs (``CudaGraphs``, the optional block
``cuda_graphs``, ``hw_profile.tables.cuda_graphs``): its points are steps replayed at exactly their size, and the
lookup prices a step at the size it is padded to, or eagerly past the largest, so T is a staircase in B.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
from numba import boolean, float64, njit

from atomic_files import atomic_write, atomic_write_text
from hw_profile.errors import HwProfileError, read_json_object
from hw_profile.tables.cuda_graphs import NO_GRAPHS, CudaGraphs
from hw_profile.tables.sidecar import (
    MEMORY_KEYS,
    SCHEMA_VERSION,
    Sidecar,
    upgrade,
)

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
PREFILL_COST = "prefill_cost"  # the sidecar's optional block (ChunkAttention)
VERIFY_ATTENTION = "verify_attention"  # the sidecar's optional block (VerifyAttention)
# Written only when a table has them: where an estimated point's kernel time came from, and whether it lay inside
# measured kernel data (hw_profile.estimate.estimate).
OPTIONAL_COLUMNS = ["source", "inside"]


def _columns(df: pd.DataFrame) -> list[str]:
    return COLUMNS + [c for c in OPTIONAL_COLUMNS if c in df.columns]


class TableError(HwProfileError):
    """A table file that cannot be used; the message names the file and what is wrong."""


def throttled_flags(column: pd.Series) -> np.ndarray:
    """The ``throttled`` column as booleans (read back from CSV as bools or strings)."""
    return column.astype(str).str.lower().isin(["true", "1"]).to_numpy()


def sidecar_path(csv_path: str | Path) -> Path:
    p = Path(csv_path)
    return p.with_suffix(".json")


def read_sidecar_json(side: Path) -> dict:
    """A sidecar's JSON object as it is on disk (not upgraded); a file that is not one is a ``TableError`` naming
    it."""
    return read_json_object(side, "sidecar", TableError)


def _number_block(meta: dict, name: str, least: dict[str, float], where: str,
                  optional: tuple[str, ...] = ()) -> tuple | None:
    """A sidecar block ``name`` of numbers (each at least its ``least``; those named in ``optional`` may be absent,
    and then read as their least) and an optional ``source`` string: the numbers in ``least``'s order, then the
    source; None without the block. ``where`` names the sidecar in errors."""
    block = meta.get(name) if isinstance(meta, dict) else None
    if block is None:
        return None
    if not isinstance(block, dict):
        needed = " and ".join(k for k in least if k not in optional)
        raise TableError(f"{where}: {name} must be an object with {needed}")
    values = []
    for key, low in least.items():
        v = block.get(key, low if key in optional else None)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < low:
            raise TableError(f"{where}: {name}.{key} must be a number >= {low:g}, got {v!r}")
        values.append(float(v))
    source = block.get("source", "")
    if not isinstance(source, str):
        raise TableError(f"{where}: {name}.source must be a string, got {source!r}")
    return (*values, source)


@dataclass(frozen=True)
class ChunkAttention:
    """The attention of prompt chunks riding in a forward, from the sidecar block ``prefill_cost``
    (``{"ns_per_token_kv": C, "source": "..."}``; older sidecars also carry ``us_per_token``, the per-token GEMM
    price of the rule this one replaced, which is read and ignored).

    A forward's GEMMs are shared by all of its tokens, so a chunk's projections and MLP are priced by T(B, K) at the
    step's total tokens (``simulator.core.forward``); what T cannot see is the chunk's causal attention: token i of
    a chunk of c tokens whose request already holds p tokens attends to p + i earlier tokens, c * (p + c / 2)
    pairs in all, C nanoseconds each (compute-bound: hundreds of queries per request).

    A model with sliding-window layers (Gemma 3) adds ``window`` (W tokens) and ``windowed_share`` (s, the share of
    the work per pair done in windowed layers): there token i attends to min(p + i, W) tokens, so a chunk's pairs
    are (1 - s) x c (p + c / 2) + s x (the integral of min(p + i, W) over i in [0, c)).

    ``ns_per_token`` (optional, may be negative) is what a prompt token's attention costs beyond what T charges a
    token of its forward: T prices every token as a decode or verify token, and some attention does per such token
    what a prompt chunk does once (a linear layer's state written for every verified position, to roll back to; a
    chunk writes its request's state once), so T overprices prompt tokens by that much (a negative term).
    """

    ns_per_token_kv: float
    source: str = ""
    window: float = 0.0
    windowed_share: float = 0.0
    ns_per_token: float = 0.0

    @classmethod
    def from_meta(cls, meta: dict, where: str) -> ChunkAttention | None:
        """The block of a sidecar's metadata, or None without one; ``where`` names the sidecar in errors."""
        block = meta.get(PREFILL_COST) if isinstance(meta, dict) else None
        if isinstance(block, dict):  # the retired per-token GEMM price is no longer part of the block
            meta = {PREFILL_COST: {k: v for k, v in block.items() if k != "us_per_token"}}
        read = _number_block(meta, PREFILL_COST, {"ns_per_token_kv": 0.0}, where)
        if read is None:
            return None
        rate, source = read
        per_token = block.get("ns_per_token", 0.0)  # a signed correction: no least
        if isinstance(per_token, bool) or not isinstance(per_token, int | float) or not math.isfinite(per_token):
            raise TableError(f"{where}: {PREFILL_COST}.ns_per_token must be a number, got {per_token!r}")
        per_token = float(per_token)
        if "window" not in block and "windowed_share" not in block:
            return cls(rate, source, ns_per_token=per_token)
        window = _number_block({PREFILL_COST: block}, PREFILL_COST, {"window": 1.0, "windowed_share": 0.0}, where)
        if window[1] > 1.0:
            raise TableError(f"{where}: {PREFILL_COST}.windowed_share must be at most 1, got {window[1]!r}")
        return cls(rate, source, window=window[0], windowed_share=window[1], ns_per_token=per_token)

    def _pairs2(self, chunks: np.ndarray, cached: np.ndarray) -> np.ndarray:
        """Twice each chunk's attention pairs (exact integers without windowed layers)."""
        c = np.asarray(chunks, dtype=np.int64)
        p = np.asarray(cached, dtype=np.int64)
        full = c * (2 * p + c)
        if not self.windowed_share:
            return full
        w = self.window
        under = np.clip(w - p, 0.0, c)  # the chunk's tokens whose p + i is still under the window
        windowed = 2.0 * under * p + under * under + 2.0 * (c - under) * w
        return (1.0 - self.windowed_share) * full + self.windowed_share * windowed

    def ms(self, chunks: np.ndarray, cached: np.ndarray) -> float:
        """Milliseconds of attention for prompt chunks of ``chunks`` tokens whose requests hold ``cached`` tokens
        before them (arrays of one length; rows with a zero chunk cost nothing)."""
        own = np.asarray(chunks).sum().item() * self.ns_per_token / 1e6 if self.ns_per_token else 0.0
        return self._pairs2(chunks, cached).sum().item() * self.ns_per_token_kv / 2e6 + own

    def each_ms(self, chunks: np.ndarray, cached: np.ndarray) -> np.ndarray:
        """``ms`` of each chunk on its own (an array)."""
        return (self._pairs2(chunks, cached) * self.ns_per_token_kv / 2e6
                + np.asarray(chunks, dtype=np.float64) * self.ns_per_token / 1e6)


@dataclass(frozen=True)
class VerifyAttention:
    """How a table priced the attention of verified tokens, from a sidecar block
    ``"verify_attention": {"tokens_per_request": q, "ns_per_kv_token": A, "ns_per_query_kv": C, "source": "..."}``
    (and ``"ns_per_request": P`` where a request's attention reads something once a step whatever its context: a
    Gated DeltaNet request's recurrent states; ``"window": W, "windowed_share": s`` where the share s of the
    attention is done in layers that see the last W tokens of a request only).

    A step's attention over K KV tokens takes max(A x K', C x q x K') ns, K' = (1 - s) K + s min(K, R W) the tokens
    it attends to (K spread evenly over its R requests; K' = K without windows): its KV is read once per request,
    and each of a request's q verified tokens computes over what that request's layers see; its R requests add
    R x P. The table priced q = min(B, its ``tokens_per_request``), so R = B / q; a step of B tokens over R requests
    verifies B / R each.
    """

    tokens_per_request: float
    ns_per_kv_token: float
    ns_per_query_kv: float
    source: str = ""
    ns_per_request: float = 0.0
    window: float = 0.0
    windowed_share: float = 0.0

    #: the keys only some models write (read as 0 where absent)
    OPTIONAL: ClassVar[tuple[str, ...]] = ("ns_per_request", "window", "windowed_share")

    @classmethod
    def from_meta(cls, meta: dict, where: str) -> VerifyAttention | None:
        """The block of a sidecar's metadata, or None without one; ``where`` names the sidecar in errors."""
        least = {"tokens_per_request": 1.0, "ns_per_kv_token": 0.0, "ns_per_query_kv": 0.0,
                 **dict.fromkeys(cls.OPTIONAL, 0.0)}
        read = _number_block(meta, VERIFY_ATTENTION, least, where, optional=cls.OPTIONAL)
        if read is None:
            return None
        q, a, c, p, window, share, source = read
        if share > 1.0 or (share > 0.0) != (window > 0.0):
            raise TableError(f"{where}: {VERIFY_ATTENTION}.window and windowed_share go together, the share in "
                             f"(0, 1]; got window {window:g}, windowed_share {share:g}")
        return cls(q, a, c, source, p, window, share)

    def to_meta(self) -> dict:
        out = {"tokens_per_request": self.tokens_per_request, "ns_per_kv_token": self.ns_per_kv_token,
               "ns_per_query_kv": self.ns_per_query_kv, "source": self.source}
        # the optional terms only where the model has them
        out.update({key: getattr(self, key) for key in self.OPTIONAL if getattr(self, key)})
        return out


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
        return cls(points=df[_columns(df)].copy(), meta=dict(meta or {}))

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
            meta = read_sidecar_json(side)
            try:
                meta = upgrade(meta)  # a sidecar from before the typed contract, as its writer priced it
            except HwProfileError as exc:
                raise TableError(f"{side}: {exc}") from None
            ChunkAttention.from_meta(meta, str(side))  # a malformed block fails here, with the table
            VerifyAttention.from_meta(meta, str(side))
            try:
                CudaGraphs.from_meta(meta, str(side))
            except HwProfileError as exc:
                raise TableError(str(exc)) from None
        if "source" in df.columns:
            df["source"] = df["source"].astype(object).where(df["source"].notna(), "").astype(str)
        return cls(points=df[_columns(df)].copy(), meta=meta, path=path)

    def write(self, path: str | Path) -> Path:
        """Write the CSV and its JSON sidecar, each atomically, the sidecar at ``SCHEMA_VERSION``. A producer that
        records a model shape records its memory facts with it (``sidecar.memory_fields``, which sets the schema):
        a sidecar that declares the schema without them is a bug of its writer, refused here rather than left to a
        reader; metadata with no schema at all (built by hand) is written as ``upgrade`` reads an old sidecar."""
        path = Path(path)
        if "schema_version" not in self.meta:  # metadata built by hand: recorded as an old sidecar is read
            self.meta = upgrade(self.meta)
        self.__dict__.pop("facts", None)
        facts = Sidecar.of(self.meta, str(sidecar_path(path)))
        missing = [k for k in MEMORY_KEYS if k not in self.meta] if facts.shape is not None else []
        if self.meta["schema_version"] != SCHEMA_VERSION:
            raise HwProfileError(f"{path}: a table's writer declared schema {self.meta['schema_version']!r}; this "
                                 f"hw_profile writes {SCHEMA_VERSION}")
        if missing:
            raise HwProfileError(f"{path}: a table's writer left out {', '.join(missing)} "
                                 "(hw_profile.tables.sidecar.memory_fields)")
        atomic_write(path, lambda tmp: self.points[_columns(self.points)].to_csv(tmp, index=False, float_format="%.6g"))
        atomic_write_text(sidecar_path(path), json.dumps(self.meta, indent=2, sort_keys=True) + "\n")
        self.path = path
        return path

    @property
    def chunk_attention(self) -> ChunkAttention | None:
        """The sidecar's price of prompt chunks' attention, if it has one."""
        return ChunkAttention.from_meta(self.meta, str(sidecar_path(self.path)) if self.path else "table metadata")

    @property
    def ok(self) -> pd.DataFrame:
        return self.points[self.points["status"] == "ok"]

    @property
    def verify_attention(self) -> VerifyAttention | None:
        """The sidecar's verification-attention block, if it has one."""
        return VerifyAttention.from_meta(self.meta, str(sidecar_path(self.path)) if self.path else "table metadata")

    @property
    def cuda_graphs(self) -> CudaGraphs | None:
        """The sidecar's captured CUDA-graph sizes (``hw_profile.tables.cuda_graphs``), if it has them."""
        return CudaGraphs.from_meta(self.meta, str(sidecar_path(self.path)) if self.path else "table metadata")

    @cached_property
    def facts(self) -> Sidecar:
        """The sidecar's typed facts (``hw_profile.tables.sidecar``; an old sidecar read through ``upgrade``)."""
        try:
            return Sidecar.of(self.meta, str(sidecar_path(self.path)) if self.path else "table metadata")
        except HwProfileError as exc:
            raise TableError(str(exc)) from None

    @cached_property
    def grid(self) -> StepTimeGrid:
        ok = self.ok
        grid = StepTimeGrid.from_points(
            ok["batch_tokens"].to_numpy(float), ok["kv_tokens"].to_numpy(float), ok["step_ms"].to_numpy(float)
        )
        return replace(grid, verify=self.verify_attention, graphs=self.cuda_graphs)

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
    """A rectangular grid ms[k, b] of step times over ascending axes b_axis (tokens) and k_axis (KV tokens).

    Every lookup, scalar or array, and the compiled callers (the greedy's walk) price T(B, K) with this module's
    one rule (``_step_ms``): piecewise linear in B along the two K rows around K, then linear in K between them,
    at the B the step is replayed at where the table records its engine's captured CUDA graphs (``graphs``:
    padded to the next captured size, or past the largest at its own B and never below the eager floor).
    ``rows`` (the step's requests) and ``prompts`` (it carries prompt chunks) matter only to an engine that
    captures by request count."""

    b_axis: np.ndarray
    k_axis: np.ndarray
    ms: np.ndarray
    verify: VerifyAttention | None = None  # how the table priced verification's attention (its sidecar's block)
    graphs: CudaGraphs | None = None  # the engine's captured CUDA graphs (its sidecar's block)

    def __post_init__(self):
        # the compiled rule takes contiguous float64 arrays
        for name in ("b_axis", "k_axis", "ms"):
            object.__setattr__(self, name, np.ascontiguousarray(getattr(self, name), dtype=np.float64))

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

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(b_axis, k_axis, ms): what a compiled caller passes to this module's kernels (``step_ms_at``)."""
        return self.b_axis, self.k_axis, self.ms

    @property
    def graph_terms(self) -> tuple[np.ndarray, bool, float]:
        """(captured sizes, counts requests, eager floor ms) of ``graphs`` for a compiled caller
        (``priced_step_ms_at``); no sizes without the block (every step priced at its own B)."""
        return NO_GRAPHS if self.graphs is None else self.graphs.terms

    def step_ms(self, batch_tokens: float, kv_tokens: float, rows: float = 0, prompts: bool = False) -> float:
        """T(B, K) in ms for one (B, K): one compiled call, cheap enough for the engine's per-step clock."""
        return _step_ms(self.b_axis, self.k_axis, self.ms, float(batch_tokens), float(kv_tokens), float(rows),
                        bool(prompts), *self.graph_terms)

    lookup = step_ms  # the engine's name for it

    def replayed(self, batch_tokens: float, rows: float = 0, prompts: bool = False) -> tuple[float, bool]:
        """(the B a step of ``batch_tokens`` tokens over ``rows`` requests is priced at, whether it runs eagerly):
        its own B without captured graphs (``graphs``)."""
        sizes, per_request, _ = self.graph_terms
        b, eager = _graph_batch(float(batch_tokens), float(rows), bool(prompts), sizes, per_request)
        return float(b), bool(eager)

    def values(self, batch_tokens: np.ndarray | float, kv_tokens: np.ndarray | float,
               rows: np.ndarray | float = 0, prompts: bool = False) -> np.ndarray:
        """``step_ms`` elementwise over arrays of (B, K) and ``rows`` (broadcast together)."""
        graphs = self.graph_terms
        if np.ndim(kv_tokens) == 0 and np.ndim(rows) == 0:  # one K (a curve, a step's SPS): its rows found once
            b = np.asarray(batch_tokens, dtype=np.float64)
            return _step_ms_at_k(self.b_axis, self.k_axis, self.ms, b.ravel(), float(kv_tokens), float(rows),
                                 bool(prompts), *graphs).reshape(b.shape)
        shape = np.broadcast_shapes(np.shape(batch_tokens), np.shape(kv_tokens), np.shape(rows))
        b, k, r = (np.broadcast_to(x, shape).astype(np.float64, order="C").ravel()
                   for x in (batch_tokens, kv_tokens, rows))
        return _step_ms_each(self.b_axis, self.k_axis, self.ms, b, k, r, bool(prompts), *graphs).reshape(shape)

    def curve(self, kv_tokens: float) -> StepCurve:
        """T as a function of B at this K."""
        return StepCurve(self, float(kv_tokens))

    @property
    def verify_terms(self) -> tuple[float, ...]:
        """(tokens per request, ns per KV token, ns per query x KV token, ns per request, window, windowed share)
        of ``verify``; all 0 without it (a compiled caller's ``verify_ms_at`` then adds nothing)."""
        v = self.verify
        if v is None:
            return (0.0,) * 6
        return (v.tokens_per_request, v.ns_per_kv_token, v.ns_per_query_kv, v.ns_per_request, v.window,
                v.windowed_share)

    def verify_ms(self, tokens: np.ndarray | float, rows: int, kv_tokens: float) -> np.ndarray | float:
        """What a step verifying ``tokens`` tokens (anchors included) for ``rows`` requests that hold ``kv_tokens``
        KV tokens costs beyond T, or saves, for verifying more or fewer tokens per request than the table priced
        (``VerifyAttention``); 0 without the block. Elementwise over an array of ``tokens``."""
        terms = self.verify_terms
        if np.ndim(tokens) == 0:
            return _verify_ms(float(tokens), float(rows), float(kv_tokens), *terms)
        t = np.asarray(tokens, dtype=np.float64)
        return _verify_ms_each(t.ravel(), float(rows), float(kv_tokens), *terms).reshape(t.shape)


@dataclass(frozen=True)
class StepCurve:
    """Step time as a function of B at a fixed K of a grid."""

    grid: StepTimeGrid
    kv_tokens: float

    def __call__(self, batch_tokens: np.ndarray | float) -> np.ndarray:
        return self.grid.values(batch_tokens, self.kv_tokens)


# --- the rule, compiled ------------------------------------------------------------------------------------------
# T(B, K) on a grid: along each K row piecewise linear in B, clamped below the first B, continued beyond the last B
# along the row's last segment with its slope clamped at zero; between two rows linear in K, at or below the first
# row that row, beyond the last row continued along the last two with the rise clamped at zero. A compiled caller
# that prices many B at one K (the greedy) finds the rows once (``k_rows``) and walks B upwards (``step_ms_at``).


@njit(cache=True, inline="always")
def k_rows(k_axis, kv):
    """Where K sits among the rows: (lo, hi, w), T(B, K) = blend of rows lo and hi with weight w (``_blend``);
    lo == hi at or below the first row (or with one row): that row alone."""
    nk = k_axis.shape[0]
    if nk == 1 or kv <= k_axis[0]:
        return 0, 0, 0.0
    j = min(max(np.searchsorted(k_axis, kv), 1), nk - 1)  # bisect_left: K on a row is that row at w = 1
    return j - 1, j, (kv - k_axis[j - 1]) / (k_axis[j] - k_axis[j - 1])


@njit(cache=True, inline="always")
def _blend(lo, hi, w):
    if w > 1.0:  # beyond the last row: never downwards
        rise = hi - lo
        return hi + (0.0 if 0.0 > rise else rise) * (w - 1.0)
    return lo + (hi - lo) * w


@njit(cache=True, inline="always")
def _along(b_axis, ms, row, b, seg, f):
    """T along row ``row`` at ``b``, given where b lies (``_b_position``)."""
    n = b_axis.shape[0]
    if seg > 0:  # inside
        return ms[row, seg - 1] + (ms[row, seg] - ms[row, seg - 1]) * f
    if seg == 0:  # clamped below the first point (or one point only)
        return ms[row, 0]
    slope = (ms[row, n - 1] - ms[row, n - 2]) / (b_axis[n - 1] - b_axis[n - 2])
    return ms[row, n - 1] + (0.0 if 0.0 > slope else slope) * (b - b_axis[n - 1])


@njit(cache=True, inline="always")
def _b_position(b_axis, b, seg):
    """Where ``b`` lies along B: (seg, f) with b between points seg - 1 and seg at fraction f, or seg 0 at or below
    the first point, or seg -1 at or beyond the last (NaN too: it stays NaN). ``seg`` given: a segment at or
    before b's (a walk's last), or 0 or -1 when there is none."""
    n = b_axis.shape[0]
    if n == 1 or b <= b_axis[0]:
        return 0, 0.0
    if not b < b_axis[n - 1]:
        return -1, 0.0
    if seg <= 0:
        seg = np.searchsorted(b_axis, b, side="right")  # bisect_right: B on a point is that point at f = 0
    else:
        while b_axis[seg] <= b:
            seg += 1
    return seg, (b - b_axis[seg - 1]) / (b_axis[seg] - b_axis[seg - 1])


@njit(cache=True, inline="always")
def step_ms_at(b_axis, ms, lo, hi, w, b, seg):
    """T(b, K) for K's rows (lo, hi, w) from ``k_rows``, and a segment hint for the next, larger b (start at 0)."""
    seg, f = _b_position(b_axis, b, seg)
    t_lo = _along(b_axis, ms, lo, b, seg, f)
    if lo == hi:
        return t_lo, seg
    return _blend(t_lo, _along(b_axis, ms, hi, b, seg, f), w), seg


@njit(cache=True, inline="always")
def graph_batch(tokens, rows, prompts, sizes, per_request, at):
    """(tokens the step is priced at, eager, the captured size's index) for a step of ``tokens`` tokens over
    ``rows`` requests on captured ``sizes`` (empty: no graphs, the step as it is). Counting tokens, the step pads to
    the first size >= its tokens; counting requests, its rows pad to the first size >= them and the tokens grow with
    them (each padded request brings the step's tokens per request; no rows given: one token each), and a step with
    prompt chunks runs eagerly. Past the largest size: eager, at its own tokens. ``at``: 0, or the index this
    returned for a smaller step (a walk's last), from which the search moves forward."""
    n = sizes.shape[0]
    if n == 0 or tokens <= 0.0:
        return tokens, False, at
    if per_request:
        if prompts:
            return tokens, True, at
        count = rows if rows > 0.0 else tokens
    else:
        count = tokens
    if count > sizes[n - 1]:
        return tokens, True, at
    if at <= 0:
        at = np.searchsorted(sizes, count)  # bisect_left: the first captured size >= count
    else:
        while sizes[at] < count:
            at += 1
    return (tokens / count) * sizes[at], False, at  # counting tokens: exactly the size


@njit(cache=True, inline="always")
def priced_step_ms_at(b_axis, ms, lo, hi, w, b, rows, prompts, seg, at, sizes, per_request, floor):
    """``step_ms_at`` at the B the step is replayed at (``graph_batch`` on the captured ``sizes``), never below
    ``floor`` when it runs eagerly; (T, segment hint, size hint). Both hints stay valid as b grows with rows and
    prompts fixed: the replayed B never falls."""
    pb, eager, at = graph_batch(b, rows, prompts, sizes, per_request, at)
    t, seg = step_ms_at(b_axis, ms, lo, hi, w, pb, seg)
    if eager and t < floor:
        t = floor
    return t, seg, at


@njit(cache=True, inline="always")
def verify_ms_at(tokens, rows, kv, q_table, a, c, p, window, share):
    """ms a step of ``tokens`` verified tokens over ``rows`` requests holding ``kv`` KV tokens adds to T for
    verifying tokens / rows per request where the table priced min(tokens, q_table), so tokens / min(tokens,
    q_table) requests (``VerifyAttention``: attention takes max(a, c x q) ns per KV token attended, a share of the
    layers seeing ``window`` tokens of each request at most, and p ns per request). 0 without the block (q_table
    0) or without requests."""
    if q_table <= 0.0 or rows <= 0.0:
        return 0.0
    priced = max(min(tokens, q_table), 1.0)
    assumed = tokens / priced
    out = (rows - assumed) * p
    if kv > 0.0:
        seen, seen_priced = kv, kv
        if window > 0.0:  # K spread evenly over the requests, as the table spread it over its own
            seen = kv * (1.0 - share) + min(kv, rows * window) * share
            seen_priced = kv * (1.0 - share) + min(kv, assumed * window) * share
        out += seen * max(a, c * max(tokens / rows, 1.0)) - seen_priced * max(a, c * priced)
    return out * 1e-6


@njit(float64(float64, float64, float64, float64, float64, float64, float64, float64, float64), cache=True)
def _verify_ms(tokens, rows, kv, q_table, a, c, p, window, share):
    return verify_ms_at(tokens, rows, kv, q_table, a, c, p, window, share)


@njit(cache=True)
def _verify_ms_each(tokens, rows, kv, q_table, a, c, p, window, share):
    out = np.empty(tokens.shape[0])
    for i in range(tokens.shape[0]):
        out[i] = verify_ms_at(tokens[i], rows, kv, q_table, a, c, p, window, share)
    return out


@njit(cache=True)
def _graph_batch(tokens, rows, prompts, sizes, per_request):
    return graph_batch(tokens, rows, prompts, sizes, per_request, 0)[:2]


@njit(float64(float64[::1], float64[::1], float64[:, ::1], float64, float64, float64, boolean, float64[::1],
             boolean, float64), cache=True)
def _step_ms(b_axis, k_axis, ms, b, kv, rows, prompts, sizes, per_request, floor):
    lo, hi, w = k_rows(k_axis, kv)
    return priced_step_ms_at(b_axis, ms, lo, hi, w, b, rows, prompts, 0, 0, sizes, per_request, floor)[0]


@njit(cache=True)
def _step_ms_at_k(b_axis, k_axis, ms, b, kv, rows, prompts, sizes, per_request, floor):
    lo, hi, w = k_rows(k_axis, kv)
    out = np.empty(b.shape[0])
    for n in range(b.shape[0]):
        out[n] = priced_step_ms_at(b_axis, ms, lo, hi, w, b[n], rows, prompts, 0, 0, sizes, per_request, floor)[0]
    return out


@njit(cache=True)
def _step_ms_each(b_axis, k_axis, ms, b, kv, rows, prompts, sizes, per_request, floor):
    out = np.empty(b.shape[0])
    for n in range(b.shape[0]):
        lo, hi, w = k_rows(k_axis, kv[n])
        out[n] = priced_step_ms_at(b_axis, ms, lo, hi, w, b[n], rows[n], prompts, 0, 0, sizes, per_request,
                                   floor)[0]
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
    # 2. row ends: continue along f(B) of the additive fit T ~ f(B) + g(K). f(B) - f(B') is only determined when
    #    columns B and B' are linked through measured cells; otherwise continue the row's own last segment.
    kj, bi = np.nonzero(known)
    nk, nb = ms.shape
    design = np.zeros((len(kj), nb + nk))
    design[np.arange(len(kj)), bi] = 1.0
    design[np.arange(len(kj)), nb + kj] = 1.0
    coef, *_ = np.linalg.lstsq(design, ms[kj, bi], rcond=None)
    f = coef[:nb]
    component = _column_components(known)
    for j in range(nk):
        have = np.flatnonzero(~np.isnan(ms[j]))
        first, last = have[0], have[-1]
        row_slope = (ms[j, last] - ms[j, have[-2]]) / (b_axis[last] - b_axis[have[-2]]) if len(have) > 1 else 0.0
        for i in range(last + 1, nb):
            step = f[i] - f[last] if component[i] == component[last] else row_slope * (b_axis[i] - b_axis[last])
            ms[j, i] = ms[j, last] + max(step, 0.0)
        for i in range(first):
            step = f[i] - f[first] if component[i] == component[first] else 0.0
            ms[j, i] = max(ms[j, first] + min(step, 0.0), 1e-6)
    return ms


def _column_components(known: np.ndarray) -> np.ndarray:
    """Connected components of B columns, two columns linked when some K row measured both."""
    nb = known.shape[1]
    parent = list(range(nb))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for row in known:
        cols = np.flatnonzero(row)
        for c in cols[1:]:
            parent[find(int(c))] = find(int(cols[0]))
    return np.array([find(i) for i in range(nb)])


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

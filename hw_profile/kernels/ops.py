"""One forward step priced from the kernel database (``hw_profile.kernels.database``): the op decomposition of a layer and
the rules that correct the database's own model of a step.

Per point (B new tokens over R requests, q = B/R query tokens each, ``context`` KV tokens per request), on
``gpus`` tensor-parallel GPUs, experts split over ``ep`` expert-parallel groups (default: one per GPU), each part
named by its family (``hw_profile.kernels.families``, the names the kernel-level roofline's parts share):

- ``gemm``: attention projections and dense MLPs / shared experts at M = B, their N or K split by ``gpus`` (the
  MLA down-projection of DeepSeek is replicated, as the engines run it), plus MLA's per-head absorption batched
  matmuls (``mla_bmm``) at B tokens where the engine's data has them.
- ``attention``: priced per request, not per query token (issue (a)). A request's q query tokens attend to the
  same KV, so the decode kernel does the work of one sequence with q x (local query heads) heads on the same KV
  heads: its KV is read once and its compute is q x context. The kernel's time is looked up at (heads = q x local
  heads, batch = R, KV = context) in the measured (heads, batch, KV) grid (for MLA, whose one latent KV is shared
  by every head, the same holds). The database's own estimator prices qR sequences of one query instead, reading
  each request's KV q times.
- DeepSeek-V4 (compressed sparse attention): the measured CSA and HCA decode modules, projections inside (the
  window-only layers priced as HCA, as the package does). A request's q tokens share what grows with its context
  (the indexer's scan, HCA's compressed rows) but each reads its own top-k rows and window, so a module is priced at
  B tokens up to the context where those per-query reads saturate (CSA: ratio x top-k, HCA: the window) plus its
  growth beyond that at R requests. Its fp4 experts need fp4 MoE rows (none on Hopper); ``mhc`` is its
  hyper-connection mixing, one pre and one post per layer at B tokens.
- DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): the measured DSA decode module, projections and indexer inside,
  priced as V4's modules are with the saturation context at the top-k: each query token reads its own selected rows,
  the indexer's scan of every index key grows with the context and is shared by a request's tokens.
- ``moe``: the routed experts' fused kernel at B tokens for this (hidden, width, top-k, experts, tp, ep) as
  measured, under balanced routing. ``moe_times`` prices an expert-parallel group's experts alone, from SGLang's
  DeepEP expert kernel where asked and measured (``wide_ep``).
- ``comm``: two all-reduces per layer of B x hidden bf16 values over ``gpus`` (none on one GPU); the same
  all-reduce closes an MoE layer, as in ``hw_profile.kernels.roofline``. The expert-parallel exchange is not in the step:
  ``exchange_times`` gives DeepEP's measured dispatch and combine where the database has them, and
  ``hw_profile.estimate.estimate`` adds the exchange as the deployment overlaps it.
- ``lm_head``: the vocabulary GEMM at M = B (every verified token needs logits), N split by ``gpus``, bf16.

The KV cache is bf16 whatever ``dtype`` (the engines' default, "auto"); ``dtype`` sets the GEMM and MoE weights
(fp8: per-tensor scaled for dense Qwen3, 128 x 128 block scaled for DeepSeek).

Not priced (they belong to the per-step overhead added elsewhere, or are small): norms, rotary, activation,
embedding lookup, sampling, kernel launch.

Lookups interpolate inside the measured grid and extrapolate linearly past its edge, never below the edge's value
(``hw_profile.kernels.grid``); a point that needed extrapolation anywhere is not ``inside``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hw_profile.errors import HwProfileError
from hw_profile.hardware.gpus import get_gpu
from hw_profile.hardware.moe import expected_distinct_experts
from hw_profile.hardware.shapes import (
    BLOCK_SPARSE,
    COMPRESSED_SPARSE,
    DSA,
    GATED_DELTANET,
    LINEAR_HYBRIDS,
    MLA,
    ModelShape,
    dense_gemms,
)
from hw_profile.kernels.database import (
    GEMM_DTYPES,
    KernelTimes,
    densest,
    find_table,
    gemm_grid,
    package_version,
    system_of,
    versions,
)
from hw_profile.kernels.families import ATTENTION, COMBINE, COMM, DISPATCH, GEMM, LM_HEAD, MHC, MOE
from hw_profile.kernels.grid import Grid

# fp4 routed experts (DeepSeek-V4): MXFP4 weights with fp8 activations first (V4's own format), then NVFP4
FP4_MOE_DTYPES = ("w4a8_mxfp4_mxfp8", "nvfp4", "w4a16_mxfp4")


@dataclass
class _Ctx:
    base: Path
    system: str
    engine: str
    version: str
    dtype: str
    gpus: int
    inside: np.ndarray
    notes: list[str] = field(default_factory=list)
    extrapolated: dict[str, int] = field(default_factory=dict)
    origin: str = ""  # where the data came from (``_origin``)

    @classmethod
    def open(cls, gpu: str, engine: str, dtype: str, gpus: int, points: np.ndarray, data_dir=None) -> _Ctx:
        """Lookups on the (gpu, engine) data for ``points`` (their shape sets ``inside``'s)."""
        base, system, version = system_of(gpu, engine, data_dir)
        return cls(base, system, engine.lower(), version, dtype, gpus, np.ones(np.shape(points), dtype=bool),
                   origin=_origin(base, data_dir))

    def times(self, parts: dict[str, np.ndarray], notes: list[str] | None = None) -> KernelTimes:
        """The lookups' result: ``parts`` summed, what was inside measured data, where it came from."""
        return KernelTimes(ms=sum(parts.values()), inside=self.inside, parts=parts,
                           source=f"{self.origin}: {self.system} / {self.engine} {self.version}",
                           notes=list(self.notes) if notes is None else notes)

    def table(self, family: str, name: str) -> pd.DataFrame | None:
        t = find_table(self.base, self.system, family, self.engine, self.version, name)
        if t is None:
            return None
        if t.version != self.version:
            self.note(f"{family}/{name} comes from {self.engine} {t.version}: the {self.version} data has no such "
                      "table.")
        return t.frame

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def take(self, what: str, value: np.ndarray, inside: np.ndarray) -> np.ndarray:
        outside = int((~inside).sum())
        if outside:
            self.extrapolated[what] = max(self.extrapolated.get(what, 0), outside)
        self.inside &= inside
        return value


def _pick(frame: pd.DataFrame, what: str, **eq) -> pd.DataFrame:
    """Rows matching every column = value; one HwProfileError line naming what the table has otherwise."""
    rows = frame
    for col, val in eq.items():
        if col not in rows.columns:  # older tables lack some columns (window_size): they hold that case only
            continue
        sub = rows[rows[col] == val]
        if sub.empty:
            have = sorted(rows[col].unique().tolist(), key=str)
            raise HwProfileError(f"kernel database: no {what} rows with {col}={val!r} (measured: {have})")
        rows = sub
    return rows


# --- GEMM ---------------------------------------------------------------------------------------------------------

def _gemm_dtype(shape: ModelShape, dtype: str) -> str:
    # a model that ships fp8 ships it block-scaled (DeepSeek's 128 x 128 scales); fp8 of a bf16 model (dense Qwen3)
    # is per-tensor
    if dtype == "fp8" and shape.checkpoint_dtype == "fp8":
        return "fp8_block"
    if dtype not in GEMM_DTYPES:
        raise HwProfileError(f"--dtype: expected one of {', '.join(sorted(GEMM_DTYPES))}, got {dtype!r}")
    return GEMM_DTYPES[dtype]


def _gemm(ctx: _Ctx, gdtype: str, m: np.ndarray, n: int, k: int, what: str) -> np.ndarray:
    gg = gemm_grid(ctx.base, ctx.system, ctx.engine, ctx.version, gdtype)
    if gg is None:
        raise HwProfileError(f"kernel database: {ctx.system}/{ctx.engine} {ctx.version} has no {gdtype} GEMM data")
    if gg.note:
        ctx.note(gg.note)
    n_max = int(gg.grid.axes[1][-1])
    pieces = [n_max] * (n // n_max) + ([n % n_max] if n % n_max else [])
    if len(pieces) > 1:
        ctx.note(f"The {what} GEMM (N = {n}) is wider than any measured N ({n_max}); it is priced as {len(pieces)} "
                 f"GEMMs of N <= {n_max} over the same input (its weights are read once either way).")
    total = np.zeros(m.shape)
    for piece in pieces:
        val, inside = gg.grid.lookup(m, np.full(m.shape, float(piece)), np.full(m.shape, float(k)))
        total = total + ctx.take(f"{what} GEMM", val, inside)
    return total


# --- attention ----------------------------------------------------------------------------------------------------

def _kv_dtype(ctx: _Ctx, frame: pd.DataFrame, shape: ModelShape) -> str:
    """The cache type whose rows price attention. The engines' default KV cache type ("auto") is the activation
    type, bf16, also for fp8 checkpoints; an fp8 cache is a serving choice (``hw-profile estimate --kv-dtype fp8``,
    the shape's ``kv_dtype``), priced from the engine's own fp8-cache rows (some engines' fp8-cache decode kernels
    are several times slower, which those rows show)."""
    if shape.kv_dtype != "fp8":
        return "bfloat16"
    if "kv_cache_dtype" in frame.columns and (frame["kv_cache_dtype"] == "fp8").any():
        return "fp8"
    ctx.note(f"{ctx.engine} on {ctx.system} has no fp8-cache attention rows; the attention is priced from its "
             "bf16-cache rows")
    return "bfloat16"


def _head_grid(rows: pd.DataFrame) -> Grid:
    rows = rows.assign(kv=rows["isl"] + rows["step"])  # a decode row's KV length: its prompt plus the steps taken
    return Grid.from_frame(rows, ["num_heads", "batch_size", "kv"])


def _gqa_attention(ctx, shape, R, q, c):
    """Decode attention of R requests of q query tokens each over c KV tokens: the kernel's time for R sequences
    with q x (local heads) query heads on the same KV heads (each KV head read once, q x its query rows)."""
    tp = ctx.gpus
    heads, kv, hd = shape.heads // tp, shape.kv_heads_per_rank(tp), shape.head_dim
    gen = ctx.table("attention", "generation_attention_perf")
    if gen is None:
        raise HwProfileError(f"kernel database: {ctx.system}/{ctx.engine} has no generation attention table")
    split = _kv_head_split(gen, kv, heads)
    if split > 1:  # more KV heads than measured: the same work as more requests of fewer heads (see _kv_head_split)
        ctx.note(f"decode attention of {kv} KV heads ({heads} query heads) a GPU looked up as {split}x the requests "
                 f"of {kv // split} KV heads ({heads // split} query heads): each (request, KV head) pair is "
                 "independent work, so the two read and compute the same")
        kv, heads, R = kv // split, heads // split, np.asarray(R) * split
    rows = densest(_pick(gen, "generation attention", num_key_value_heads=kv, head_dim=hd,
                         kv_cache_dtype=_kv_dtype(ctx, gen, shape), window_size=0))
    _pick(rows, "generation attention", num_heads=heads)
    t, inside = _head_grid(rows).lookup(q * heads, R, c)
    return ctx.take("decode attention", t, inside)


def _kv_head_split(gen: pd.DataFrame, kv: int, heads: int) -> int:
    """1 when the database measured ``kv`` KV heads; else the least k for which it measured kv / k KV heads with
    heads / k query heads (the same query heads per KV head). Decode attention over R requests of kv KV heads is
    R x kv independent (request, KV head) pairs, each reading its own KV and computing its own query rows, so it is
    the same work as k x R requests of kv / k heads: multi-head attention (Llama-2-7B's 32 KV heads) takes the
    measured kernel of a GQA layout instead of the roofline. 1 when no such layout was measured (the caller's
    lookup then names what is missing)."""
    measured = gen[["num_key_value_heads", "num_heads"]].drop_duplicates()
    if (measured["num_key_value_heads"] == kv).any():
        return 1
    for k in range(2, kv + 1):
        if kv % k or heads % k:
            continue
        if ((measured["num_key_value_heads"] == kv // k) & (measured["num_heads"] == heads // k)).any():
            return k
    return 1


def _mla_projections(ctx, shape, gdtype, m, heads):
    """The MLA block's own GEMMs (fused q_a/kv_a down-projection, q_b up-projection, output) at M = m tokens
    with ``heads`` local heads (an array: the module rows are looked up at q x heads)."""
    gg = gemm_grid(ctx.base, ctx.system, ctx.engine, ctx.version, gdtype)
    if gg is None:
        raise HwProfileError(f"kernel database: {ctx.system}/{ctx.engine} {ctx.version} has no {gdtype} GEMM data")
    total = np.zeros(m.shape)
    down = shape.q_lora_rank + shape.kv_lora_rank + shape.qk_rope_head_dim
    qk = shape.head_dim + shape.qk_rope_head_dim
    for n, k in ((np.full(m.shape, float(down)), np.full(m.shape, float(shape.hidden))),
                 (heads * qk, np.full(m.shape, float(shape.q_lora_rank))),
                 (np.full(m.shape, float(shape.hidden)), heads * shape.v_head_dim)):
        v, ins = gg.grid.lookup(m, n, k)
        total = total + ctx.take("MLA projection GEMM", v, ins)
    return total


def _mla_rows(frame: pd.DataFrame, what: str, **eq) -> pd.DataFrame:
    rows = _pick(frame, what, **eq)
    return densest(rows)  # num_heads counts local heads (tp_size only labels the split it stands for)


def _mla_attention(ctx, shape, R, q, c, B, gdtype):
    """MLA decode in the absorbed form the engines run: every head scores the one shared latent, so q query tokens
    of a request are q x (local heads) query rows over its KV, read once. Returns (attention ms per layer, extra
    GEMM ms for all layers)."""
    heads = shape.heads // ctx.gpus
    qh = q * heads
    kernel = ctx.table("mla", "generation_mla_perf")
    if kernel is not None:
        rows = _mla_rows(kernel, "MLA decode", kv_cache_dtype=_kv_dtype(ctx, kernel, shape))
        _pick(rows, "MLA decode", num_heads=heads)
        t, inside = _head_grid(rows).lookup(qh, R, c)
        t = ctx.take("MLA decode", t, inside)
        extra_gemm = np.zeros_like(B)
        bmm = ctx.table("mla_bmm", "mla_bmm_perf")
        if bmm is not None:
            bdt = "fp8" if ctx.dtype == "fp8" and (bmm["bmm_dtype"] == "fp8").any() else "bfloat16"
            for op in ("mla_gen_pre", "mla_gen_post"):
                r = densest(_pick(bmm, "MLA absorption bmm", op_name=op, num_heads=heads, bmm_dtype=bdt))
                v, ins = Grid.from_frame(r, ["num_tokens"]).lookup(B)
                extra_gemm = extra_gemm + ctx.take("MLA bmm", v, ins) * shape.layers
        else:
            ctx.note("MLA absorption batched matmuls are not priced: the engine's data has no mla_bmm table.")
        return t, extra_gemm, False
    module = ctx.table("mla", "mla_generation_module_perf")
    if module is None:
        raise HwProfileError(f"kernel database: {ctx.system}/{ctx.engine} has no MLA decode data")
    gt = gdtype if (module["gemm_type"] == gdtype).any() else "bfloat16"
    rows = _mla_rows(module, "MLA decode module", kv_cache_dtype=_kv_dtype(ctx, module, shape), gemm_type=gt)
    _pick(rows, "MLA decode module", num_heads=heads)
    grid = _head_grid(rows)
    h = np.full(B.shape, float(heads))
    t_q, in_q = grid.lookup(qh, R, c)
    t_1, in_1 = grid.lookup(h, R, c)
    t_q, t_1 = ctx.take("MLA decode module", t_q, in_q), ctx.take("MLA decode module", t_1, in_1)
    # The module row also timed its projections, at M = R. Priced: the row at the model's heads, its projections
    # moved to M = B, plus what q x heads adds beyond its own (wider) projections, never below zero (the module's
    # internal GEMMs need not match the GEMM table, which would otherwise make q > 1 cheaper than q = 1).
    p_b, p_r = _mla_projections(ctx, shape, gt, B, h), _mla_projections(ctx, shape, gt, R, h)
    growth = np.maximum(t_q - t_1 - (_mla_projections(ctx, shape, gt, R, qh) - p_r), 0.0)
    ctx.note(f"MLA on {ctx.engine} is measured only as a whole module (projections included, {gt} GEMMs): priced "
             "as the module row for R sequences at the model's heads, its projections moved from M = R to M = B "
             "with the engine's GEMM data, plus the row's growth from heads to q x heads net of its projections' "
             "growth (floored at zero).")
    return t_1 + growth, (p_b - p_r) * shape.layers, True


def _own_reads_then_shared(ctx, grid: Grid, h, B, R, c, sat: float, what: str) -> np.ndarray:
    """A sparse attention module measured one query token per sequence (``grid`` over heads, sequences, KV), for B
    query tokens of R requests over c KV tokens, when each query token reads its own rows up to ``sat`` context
    tokens and what grows beyond that is shared by its request: M(B, min(c, sat)) + M(R, c) - M(R, min(c, sat))."""
    c_sat = np.minimum(c, float(sat))
    parts = []
    for b, kv in ((B, c_sat), (R, c), (R, c_sat)):
        v, ins = grid.lookup(h, b, kv)
        parts.append(ctx.take(what, v, ins))
    return parts[0] + parts[1] - parts[2]


def _dsa_rows(ctx, shape, tab: pd.DataFrame, gdtype: str, heads: int, what: str) -> tuple[pd.DataFrame, str, str]:
    """A DSA module table's rows for this model at ``heads`` local heads: (rows, the model measured, GEMM type)."""
    variant = "glm-5" if shape.family == "glm_moe_dsa" else "deepseek-v3.2"
    rows = tab[tab["model"].str.lower().str.contains(variant, regex=False)]
    if rows.empty:
        raise HwProfileError(f"kernel database: no sparse attention rows for {shape.name} on {ctx.system}/"
                             f"{ctx.engine} (models: {sorted(set(tab['model']))})")
    gt = gdtype if (rows["gemm_type"] == gdtype).any() else "bfloat16"
    rows = _pick(rows, what, gemm_type=gt, kv_cache_dtype=_kv_dtype(ctx, rows, shape))
    models = sorted(set(rows["model"]))
    model = next((m for m in models if shape.name.lower() in m.lower()), models[0])
    return densest(_pick(rows[rows["model"] == model], what, num_heads=heads)), model, gt


def _dsa_attention(ctx, shape, B, R, c, gdtype):
    """DeepSeek sparse attention (DeepSeek-V3.2, GLM-5) from the measured decode module (projections, indexer and
    sparse MLA inside), all layers. Each query token reads its own ``index_topk`` selected rows; what grows beyond
    them (the indexer's scan of every index key) is shared by a request's tokens (``_own_reads_then_shared``)."""
    tab = ctx.table("sparse_attention", "dsa_generation_module_perf")
    if tab is None:
        raise HwProfileError(f"kernel database: {ctx.system}/{ctx.engine} has no DeepSeek sparse attention decode "
                             "module data")
    heads = shape.heads // ctx.gpus
    rows, model, gt = _dsa_rows(ctx, shape, tab, gdtype, heads, "DeepSeek sparse attention module")
    ctx.note(f"DeepSeek sparse attention: the measured decode module of {model} ({gt} GEMMs, "
             f"{rows['kv_cache_dtype'].iloc[0]} KV; projections and indexer inside) at B tokens up to the context "
             f"where a query's own reads saturate (its top {shape.index_topk} rows), and its growth beyond it at R "
             "requests: the indexer's scan is read once per request.")
    return shape.layers * _own_reads_then_shared(ctx, _head_grid(rows), np.full(B.shape, float(heads)), B, R, c,
                                                 shape.index_topk, "DeepSeek sparse attention module")


def _v4_rows(ctx, shape, tab: pd.DataFrame, kind: str, heads: int) -> pd.DataFrame:
    """A V4 CSA or HCA module table's rows for this model (Flash or Pro) at ``heads`` local heads."""
    variant = "flash" if "flash" in shape.name.lower() else "pro"
    rows = tab[tab["model"].str.lower().str.contains(variant)]
    if rows.empty:
        raise HwProfileError(f"kernel database: no DeepSeek-V4 {kind.upper()} rows for {shape.name} on "
                             f"{ctx.system}/{ctx.engine} (models: {sorted(set(tab['model']))})")
    return densest(_pick(rows, f"DeepSeek-V4 {kind.upper()} module", num_heads=heads))


def _v4_attention(ctx, shape, B, R, c):
    """DeepSeek-V4 decode attention from the measured CSA and HCA modules (projections, compressor, indexer and
    sparse attention inside), all layers.

    A request's q tokens share what grows with its context (the indexer's scan of the compressed keys, HCA's
    compressed rows) but each selects its own top-k rows and has its own window. So the module is priced at B
    tokens over the context at which those per-query reads saturate (CSA: ratio x top-k; HCA: the window), plus
    its growth from there to the real context at R requests: M(B, min(c, sat)) + M(R, c) - M(R, min(c, sat))."""
    heads = shape.heads // ctx.gpus
    h = np.full(B.shape, float(heads))
    window_only = shape.layers - shape.csa_layers - shape.hca_layers
    total = np.zeros(B.shape)
    for kind, layers, sat in (("csa", shape.csa_layers, shape.csa_ratio * shape.index_topk),
                              ("hca", shape.hca_layers + window_only, shape.sliding_window)):
        if not layers:
            continue
        tab = ctx.table("sparse_attention", f"dsv4_{kind}_generation_module_perf")
        if tab is None:
            raise HwProfileError(f"kernel database: {ctx.system}/{ctx.engine} has no DeepSeek-V4 {kind.upper()} "
                                 "decode module data")
        rows = _v4_rows(ctx, shape, tab, kind, heads)
        total = total + layers * _own_reads_then_shared(ctx, _head_grid(rows), h, B, R, c, sat,
                                                        f"V4 {kind.upper()} module")
    ctx.note(f"DeepSeek-V4 attention: the measured CSA and HCA decode modules ({rows['kv_cache_dtype'].iloc[0]} "
             f"KV, as V4 stores it; the {window_only} window-only layers priced as HCA layers, as the package does) "
             "at B tokens up to the context where each query's own reads (top-k rows, window) saturate, and their "
             "growth beyond it at R requests: what grows with the context is read once per request.")
    return total


# --- prompt chunks ------------------------------------------------------------------------------------------------

# Cached tokens from which a sparse context module's time grows in proportion to them: past every per-query
# saturation (V4's CSA reads its top-k of ratio x top-k tokens and HCA its window; DSA its top-k rows), what grows is
# the indexer's scan and HCA's compressed rows, one pass per chunk token over the cached prefix
PREFIX_LINEAR_FROM = 16384
# Chunks of this many tokens a prompt or more: there the growth per (chunk token, cached token) is the same at every
# chunk size (compute-bound, within a few percent on the H200's V4 modules); a chunk of a few tokens reads the
# prefix as decode does and pays several times more per pair, which prompt chunks, hundreds of tokens each, do not
PREFIX_CHUNK_FROM = 512
PREFIX_FIT_R2 = 0.9  # the least share of a sweep's variance its line must explain


def _prefix_slope(rows: pd.DataFrame) -> float | None:
    """ms per (chunk token x cached token) of one context module: per measured chunk (``batch_size`` prompts of
    ``isl`` >= ``PREFIX_CHUNK_FROM`` tokens each), the least-squares slope of its time over the cached prefix
    (``step``) from ``PREFIX_LINEAR_FROM`` tokens on, over its ``batch_size x isl`` tokens, where a rising line
    explains the sweep (R^2 >= ``PREFIX_FIT_R2``); the median over chunks. None without such a sweep (some engines'
    tables hold prefixes of 0 and 128 tokens only, or one past 16K; GLM-5.2's barely move with the prefix)."""
    slopes = []
    swept = rows[(rows["step"] >= PREFIX_LINEAR_FROM) & (rows["isl"] >= PREFIX_CHUNK_FROM)]
    for (batch, isl), chunk in swept.groupby(["batch_size", "isl"]):
        if chunk["step"].nunique() < 3:
            continue
        x, y = chunk["step"].to_numpy(float), chunk["latency"].to_numpy(float)
        slope, intercept = np.polyfit(x, y, 1)
        # a line that explains the sweep (some tables barely grow, or jump about, with the prefix: not a rate)
        if slope > 0 and np.sum((y - slope * x - intercept) ** 2) <= (1 - PREFIX_FIT_R2) * np.sum((y - y.mean()) ** 2):
            slopes.append(slope / (batch * isl))
    return float(np.median(slopes)) if slopes else None


def chunk_pair_ns(shape: ModelShape, gpu: str, engine: str, dtype: str, gpus: int,
                  data_dir=None) -> tuple[float, str] | None:
    """What a prompt chunk's attention costs per (chunk token, cached token it attends to), ns over all layers on
    one of ``gpus`` tensor-parallel GPUs, from the measured context modules of sparse attention (DeepSeek-V4's CSA
    and HCA, DSA): their growth with the cached prefix (``_prefix_slope``); and a line saying where it came from.
    The modules' per-token work (projections, compressor, the chunk's own window) is T's, as for every forward.
    None for other attention (the roofline prices it) or where the engine's tables have no sweep over prefixes."""
    kind = shape.attention_kind
    if kind not in (COMPRESSED_SPARSE, DSA):
        return None
    ctx = _Ctx.open(gpu, engine, dtype, gpus, np.zeros(1), data_dir)
    heads = shape.heads // gpus
    if kind == DSA:
        modules = [("dsa", shape.layers)]
    else:  # a window-only V4 layer does not grow with the prefix
        modules = [("csa", shape.csa_layers), ("hca", shape.hca_layers)]
    ns, priced = 0.0, []
    for name, layers in modules:
        if not layers:
            continue
        tab = ctx.table("sparse_attention",
                        "dsa_context_module_perf" if name == "dsa" else f"dsv4_{name}_context_module_perf")
        if tab is None:
            return None
        rows = (_dsa_rows(ctx, shape, tab, _gemm_dtype(shape, dtype), heads, "DSA context module")[0]
                if name == "dsa" else _v4_rows(ctx, shape, tab, name, heads))
        slope = _prefix_slope(rows)
        if slope is None:
            return None
        ns += layers * slope * 1e6
        priced.append(name.upper())
    return ns, (f"measured {' and '.join(priced)} context modules ({ctx.origin}: {ctx.system} / {ctx.engine} {ctx.version}, "
                f"{heads} heads a GPU): their growth with the cached prefix past {PREFIX_LINEAR_FROM:,} tokens")


GDN_CHUNK_KERNELS = ("causal_conv1d_fn", "chunk_gated_delta_rule")  # a Gated DeltaNet layer's prefill, measured


def chunk_token_ns(shape: ModelShape, gpu: str, engine: str, dtype: str, gpus: int, tokens: int,
                   data_dir=None) -> tuple[float, str] | None:
    """A prompt chunk's own linear attention per chunk token, ns over all linear layers on one of ``gpus``
    tensor-parallel GPUs, from the measured prefill kernels of Gated DeltaNet (the causal convolution and the chunked
    delta rule) for one prompt of ``tokens``, where the database measured the head layout (Qwen3.5's, whichever
    model of the family: the kernels see heads and head widths); and a line saying where it came from. None for
    other attention (Kimi Delta Attention's kernels are not measured) or an unmeasured layout."""
    if shape.attention_kind != GATED_DELTANET:
        return None
    ctx = _Ctx.open(gpu, engine, dtype, gpus, np.zeros(1), data_dir)
    tab = ctx.table("linear_attention", "gdn_perf")
    if tab is None:
        return None
    rows = tab[(tab["phase"] == "context") & (tab["batch_size"] == 1)
               & (tab["num_k_heads"] == shape.linear_key_heads // gpus)
               & (tab["num_v_heads"] == shape.linear_value_heads // gpus)
               & (tab["head_k_dim"] == shape.linear_key_head_dim) & (tab["head_v_dim"] == shape.linear_value_head_dim)]
    if rows.empty:
        return None
    models = sorted(set(rows["model_name"]))
    model = next((m for m in models if shape.name.lower() in m.lower()), models[0])
    rows = rows[rows["model_name"] == model]
    ms = 0.0
    for kernel in GDN_CHUNK_KERNELS:
        one = rows[rows["kernel_source"] == kernel]
        if one.empty:
            return None
        v, inside = Grid.from_frame(one, ["seq_len"]).lookup(np.array([float(tokens)]))
        ms += float(ctx.take(f"Gated DeltaNet {kernel}", v, inside)[0])
    return (shape.linear_attention_layers * ms * 1e6 / tokens,
            f"measured Gated DeltaNet prefill kernels ({' + '.join(GDN_CHUNK_KERNELS)}; {ctx.origin}: {ctx.system} / "
            f"{ctx.engine} {ctx.version}, {model}'s layout of {shape.linear_key_heads // gpus} key and "
            f"{shape.linear_value_heads // gpus} value heads a GPU) for one {tokens:,}-token prompt, "
            f"{shape.linear_attention_layers} layers")


# --- MoE and communication ----------------------------------------------------------------------------------------

# The expert kernels of SGLang's DeepEP decode (DeepGEMM's masked grouped GEMM), timed apart by the database
WIDE_EP_MOE = "wideep_generation_moe_perf"
# DeepEP's low-latency dispatch and combine, us per call, by node count and tokens per rank
WIDE_EP_EXCHANGE = "wideep_deepep_ll_perf"
GPUS_PER_NODE = 8  # the database's multi-node exchange rows were measured on 8-GPU nodes


def _moe_weight_dtype(ctx) -> str:
    """The measured experts' type for the deployment's (DeepSeek's fp8 experts are 128 x 128 block scaled)."""
    return "fp8_block" if ctx.dtype == "fp8" else GEMM_DTYPES.get(ctx.dtype, ctx.dtype)


class _SizeNotMeasured(HwProfileError):
    """An expert kernel's rows match the shape but not the expert-parallel size asked for."""


def _pick_ep(ctx, frame: pd.DataFrame, what: str, ep: int, B: np.ndarray, nearest: bool,
             **eq) -> tuple[pd.DataFrame, np.ndarray]:
    """Rows of an expert kernel at expert-parallel size ``ep`` (and ``eq``), with the group's tokens to look them up
    at. ``nearest``: at a size the database lacks (EP144), the measured size nearest to it in ratio at the same
    tokens per rank: a rank's kernel sees only its own experts' tokens, so it does the same work but for its expert
    count, E/ep against E/ep' (a note says so)."""
    rows = _pick(frame, what, **eq)
    if "moe_ep_size" not in rows.columns or (rows["moe_ep_size"] == ep).any():
        return _pick(rows, what, moe_ep_size=ep), B
    if not nearest:
        have = sorted(rows["moe_ep_size"].unique().tolist(), key=str)  # as ``_pick`` lists them
        raise _SizeNotMeasured(f"kernel database: no {what} rows with moe_ep_size={ep} (measured: {have})")
    near = int(min(set(rows["moe_ep_size"]), key=lambda e: (abs(np.log(e / ep)), e)))
    ctx.note(f"Routed experts: no rows at ep {ep}; those at ep {near} at the same tokens per rank (each rank "
             f"holding {eq.get('num_experts', 0) / near:g} experts, not {eq.get('num_experts', 0) / ep:g}).")
    return _pick(rows, what, moe_ep_size=near), B * near / ep


def _wide_ep_moe_rows(ctx, shape, ep, B, nearest: bool) -> tuple[pd.DataFrame, np.ndarray] | None:
    """The group's rows of SGLang's DeepEP decode expert kernel where the database measured this shape, with the
    tokens to look them up at (``_pick_ep``); else None (the fused MoE table prices the experts, with a note)."""
    tab = ctx.table("moe", WIDE_EP_MOE)
    if tab is not None and shape.expert_dtype not in ("fp4", "w4a16"):
        try:
            return _pick_ep(ctx, tab, f"MoE ({shape.name})", ep, B, nearest, hidden_size=shape.expert_width,
                            inter_size=shape.expert_intermediate, topk=shape.experts_per_token,
                            num_experts=shape.experts, moe_tp_size=1, moe_dtype=_moe_weight_dtype(ctx))
        except HwProfileError:
            pass
    ctx.note(f"Routed experts: no {WIDE_EP_MOE} rows for {shape.name} at ep {ep} on {ctx.system}/{ctx.engine}; "
             "the fused MoE kernel's rows price them instead.")
    return None


def _moe(ctx, shape, B, ep, wide_ep: bool = False):
    """The routed experts at B tokens (all of the expert-parallel group's). ``wide_ep``: the kernel SGLang runs
    behind DeepEP's low-latency exchange where measured, else the fused MoE kernel. Under pure expert parallelism
    at a size neither kernel was measured at, the same two at the nearest size measured (``_pick_ep``)."""
    noted = len(ctx.notes)
    try:
        return _moe_at(ctx, shape, B, ep, wide_ep, nearest=False)
    except _SizeNotMeasured:  # any other failure would fail the same way at another size
        if ctx.gpus != ep:  # experts split by tensor parallelism too: another size is another kernel
            raise
        del ctx.notes[noted:]  # what the failed attempt said does not describe the lookup that follows
        return _moe_at(ctx, shape, B, ep, wide_ep, nearest=True)


def _moe_at(ctx, shape, B, ep, wide_ep: bool, nearest: bool):
    """``_moe`` at this size only, or (``nearest``) at the nearest measured one."""
    found = _wide_ep_moe_rows(ctx, shape, ep, B, nearest) if wide_ep else None
    if found is not None:
        rows, at = found
        return _moe_lookup(ctx, shape, rows, at, ep, str(rows["moe_dtype"].iloc[0]))
    tab = ctx.table("moe", "moe_perf")
    if tab is None:
        raise HwProfileError(f"kernel database: {ctx.system}/{ctx.engine} has no MoE table")
    rows, B = _pick_ep(ctx, tab, f"MoE ({shape.name})", ep, B, nearest, hidden_size=shape.expert_width,
                       inter_size=shape.expert_intermediate, topk=shape.experts_per_token,
                       num_experts=shape.experts, moe_tp_size=ctx.gpus // ep)
    if shape.expert_dtype in ("fp4", "w4a16"):
        have = set(rows["moe_dtype"])
        kinds = ("w4a16_mxfp4",) if shape.expert_dtype == "w4a16" else FP4_MOE_DTYPES
        moe_dtype = next((d for d in kinds if d in have), None)
        if moe_dtype is None:
            raise HwProfileError(f"kernel database: no fp4 expert data for {shape.name} on {ctx.system}/{ctx.engine} "
                                 f"(its MoE shape is measured in {sorted(have)} only)")
    else:
        moe_dtype = _moe_weight_dtype(ctx)
    return _moe_lookup(ctx, shape, _pick(rows, f"MoE ({shape.name})", moe_dtype=moe_dtype), B, ep, moe_dtype)


def _moe_lookup(ctx, shape, rows, B, ep, moe_dtype):
    """Every MoE layer's routed experts at B tokens from one kernel's rows, measured under balanced routing (the
    database calls it ``balanced`` or ``uniform``; its power-law rows are skewed on purpose), less the weights of the
    experts a balanced batch reads that B tokens routed at random do not touch (``unbalanced_savings_ms``)."""
    have = set(rows["distribution"])
    dist = next((d for d in ("balanced", "uniform") if d in have), rows["distribution"].iloc[0])
    rows = densest(rows[rows["distribution"] == dist])
    measured_ep = int(rows["moe_ep_size"].iloc[0]) if "moe_ep_size" in rows.columns else ep
    grid = Grid.from_frame(rows, ["num_tokens"])
    v, ins = grid.lookup(B)
    if dist in ("balanced", "uniform"):
        v = v - unbalanced_savings_ms(grid, shape, B)
    ctx.note(f"Routed experts: the measured MoE kernel ({rows['kernel_source'].iloc[0]}, {moe_dtype}, "
             f"tp {ctx.gpus // ep} x ep {measured_ep}) under {dist} routing at B tokens, less the experts that "
             "balanced routing reads and B tokens routed at random leave untouched.")
    return ctx.take("MoE", v, ins) * shape.moe_layers


def unbalanced_savings_ms(grid: Grid, shape: ModelShape, tokens: np.ndarray) -> np.ndarray:
    """What a balanced MoE measurement reads beyond B tokens routed at random, ms a layer.

    A balanced batch spreads its B x k assignments over distinct experts until all E are covered, so it reads
    min(B k, E) experts' weights; B tokens routed at random touch E (1 - (1 - k/E)^B) of them
    (``hw_profile.hardware.moe.expected_distinct_experts``, the rule the roofline prices experts by), fewer while
    the batch is small: 28.7 rather than 32 of gpt-oss's 128 at 8 tokens, 92 rather than all 128 at 40. A decode or
    verify step is random in this sense: its requests route independently. Each expert left untouched saves what
    the measured kernel pays per expert while it is bound by weights: its rise from one token to E/k tokens (the
    first balanced batch to touch them all) over the E - k experts it adds. The tokens' arithmetic is unchanged."""
    e, k = shape.experts, shape.experts_per_token
    if e <= k:
        return np.zeros_like(np.asarray(tokens, dtype=float))
    first, full = grid.lookup(np.array([1.0, e / k]))[0]
    per_expert = max(float(full - first), 0.0) / (e - k)
    b = np.asarray(tokens, dtype=float)
    balanced = np.minimum(b * k, e)
    untouched = balanced - expected_distinct_experts(b, e, k)
    return per_expert * np.maximum(untouched, 0.0)


def _exchange_rows(ctx, shape, nodes: int) -> pd.DataFrame | None:
    """DeepEP low-latency rows for this hidden size and top-k over ``nodes`` nodes, from the newest version of the
    table that has them (only some versions measured more than one node); the nearest expert count where the
    shape's own is not measured (it sets buffer sizes, not the bytes moved)."""
    for version in reversed(versions(ctx.base, ctx.system, "comm", ctx.engine)):
        t = find_table(ctx.base, ctx.system, "comm", ctx.engine, version, WIDE_EP_EXCHANGE)
        if t is None or t.version != version:
            continue
        f = t.frame
        f = f[(f["node_num"] == nodes) & (f["hidden_size"] == shape.expert_width) & (f["num_topk"] == shape.experts_per_token)]
        if f.empty:
            continue
        experts = min(set(f["num_experts"]), key=lambda e: (abs(e - shape.experts), e))
        if experts != shape.experts:
            ctx.note(f"Exchange: no DeepEP rows for {shape.experts} experts; those for {experts} are used.")
        if version != ctx.version:
            ctx.note(f"comm/{WIDE_EP_EXCHANGE} over {nodes} node(s) comes from {ctx.engine} {version}.")
        return f[f["num_experts"] == experts]
    return None


def exchange_times(shape: ModelShape, gpu: str, engine: str, ep: int, tokens, data_dir=None) -> KernelTimes | None:
    """DeepEP's low-latency dispatch and combine as measured, for every MoE layer of an expert-parallel group of
    ``ep`` GPUs at ``tokens`` per rank: parts ``dispatch`` and ``combine`` (ms per step). None where the database
    has no such rows (an engine other than SGLang, a group that is not whole 8-GPU nodes, a hidden size or top-k
    it did not measure, rack-scale NVLink parts): the estimate's own exchange then."""
    b = np.asarray(tokens, dtype=float)
    ctx = _Ctx.open(gpu, engine, "fp8", ep, b, data_dir)
    # a rack-scale NVLink part (an NVL72) keeps the group's exchange on NVLink, not the measured nodes' RDMA
    if ep < GPUS_PER_NODE or ep % GPUS_PER_NODE or get_gpu(gpu).nvlink_domain > GPUS_PER_NODE:
        return None
    rows = _exchange_rows(ctx, shape, ep // GPUS_PER_NODE)
    if rows is None:
        return None
    parts = {}
    for half in (DISPATCH, COMBINE):
        v, ins = Grid.from_frame(rows, ["num_token"], value=f"{half}_avg_t_us").lookup(b)
        # never below the fewest tokens' time: a line continued down from the first two points would undercut it
        v = np.maximum(v, float(rows.loc[rows["num_token"].idxmin(), f"{half}_avg_t_us"]))
        parts[half] = ctx.take(f"DeepEP {half}", v, ins) * 1e-3 * shape.moe_layers
    note = (f"expert-parallel dispatch/combine: DeepEP's low-latency kernels as measured on {ctx.system} over "
            f"{ep // GPUS_PER_NODE} node(s) of {GPUS_PER_NODE} GPUs at the rank's tokens ({WIDE_EP_EXCHANGE})")
    return ctx.times(parts, [note, *ctx.notes])


SHARED_EXPERT_GEMMS = ("shared gate_up", "shared down")  # their names in ``dense_gemms``


def gemm_times(shape: ModelShape, gpu: str, engine: str, dtype: str, gpus: int, tokens, names,
               data_dir=None) -> KernelTimes:
    """The dense GEMMs of one forward named ``names`` (``shapes.dense_gemms``; e.g. ``SHARED_EXPERT_GEMMS``) at M =
    ``tokens`` on one of ``gpus`` tensor-parallel GPUs: part ``gemm``, ms per step (zero where the model has none of
    them)."""
    B = np.asarray(tokens, dtype=float)
    ctx = _Ctx.open(gpu, engine, dtype, gpus, B, data_dir)
    gdtype = _gemm_dtype(shape, dtype)
    total = np.zeros(B.shape)
    for name, n, k, count in dense_gemms(shape, gpus):
        if name in names:
            total = total + _gemm(ctx, gdtype, B, n, k, name) * count
    return ctx.times({GEMM: total})


def moe_times(shape: ModelShape, gpu: str, engine: str, dtype: str, ep: int, tokens, wide_ep: bool = False,
              gpus: int | None = None, data_dir=None) -> KernelTimes:
    """The routed experts alone of ``gpus`` GPUs (default ``ep``) whose experts are split over ``ep``
    expert-parallel groups (tensor parallel over gpus / ep inside each) at ``tokens``, every rank's together: part
    ``moe``, ms per step. ``wide_ep``: the kernel SGLang runs behind DeepEP where measured."""
    B = np.asarray(tokens, dtype=float)
    gpus = ep if gpus is None else gpus
    if ep < 1 or gpus % ep:
        raise HwProfileError(f"--ep: expected a divisor of --gpus {gpus}, got {ep}")
    ctx = _Ctx.open(gpu, engine, dtype, gpus, B, data_dir)
    return ctx.times({MOE: _moe(ctx, shape, B, ep, wide_ep)})


def _mhc(ctx, shape, B):
    """DeepSeek-V4's hyper-connection mixing, one pre and one post per layer, at B tokens."""
    tab = ctx.table("mhc", "mhc_module_perf")
    if tab is None:
        raise HwProfileError(f"kernel database: {ctx.system}/{ctx.engine} has no mHC module data")
    total = np.zeros(B.shape)
    for op in ("pre", "post"):
        rows = _pick(tab, "mHC module", op_name=op, hidden_size=shape.hidden)
        # the engines dispatch to one kernel per token range: the fastest measured source at each size
        rows = rows.groupby("num_tokens", as_index=False)["latency"].min()
        v, ins = Grid.from_frame(rows, ["num_tokens"]).lookup(B)
        total = total + ctx.take("mHC", v, ins)
    return total * shape.layers


def _allreduce(ctx, shape, B):
    if ctx.gpus == 1:
        return np.zeros_like(B)
    tab = ctx.table("comm", "custom_allreduce_perf")
    rows = None
    if tab is not None:
        sub = tab[(tab["num_gpus"] == ctx.gpus) & (tab["allreduce_dtype"] == "bfloat16")]
        if "backend" in sub.columns and sub["backend"].astype(str).str.contains("graph").any():
            sub = sub[sub["backend"].astype(str).str.contains("graph")]  # decode runs under CUDA graphs
        rows = densest(sub) if not sub.empty else None
    if rows is None:
        nccl = find_table(ctx.base, ctx.system, "comm", "nccl", "", "nccl_perf")
        if nccl is not None:
            sub = nccl.frame[(nccl.frame["op_name"] == "all_reduce") & (nccl.frame["num_gpus"] == ctx.gpus)
                             & (nccl.frame["nccl_dtype"].isin(["half", "bfloat16"]))]
            if not sub.empty:
                rows = sub
                ctx.note(f"All-reduce: {ctx.engine}'s custom all-reduce has no {ctx.gpus}-GPU data on {ctx.system}; "
                         f"NCCL {nccl.version}'s all-reduce is used.")
    if rows is None:
        raise HwProfileError(f"kernel database: no all-reduce data for {ctx.gpus} GPUs on {ctx.system}/{ctx.engine}")
    v, ins = Grid.from_frame(rows, ["message_size"]).lookup(B * shape.hidden)  # message size counts elements
    return ctx.take("all-reduce", v, ins) * 2 * shape.layers


def _origin(base: Path, data_dir) -> str:
    """Where a lookup's data came from: the installed package, or the directory a caller (a test) pointed at."""
    return f"aiconfigurator-core {package_version()}" if data_dir is None else f"kernel database {base}"


# --- the step -----------------------------------------------------------------------------------------------------

def step_times(shape: ModelShape, gpu: str, engine: str, dtype: str, gpus: int, ep: int | None,
               tokens, requests, context, data_dir=None) -> KernelTimes:
    B, R, c = (np.asarray(x, dtype=float) for x in np.broadcast_arrays(tokens, requests, context))
    ctx = _Ctx.open(gpu, engine, dtype, gpus, B, data_dir)
    if gpus < 1 or (shape.heads % gpus):
        raise HwProfileError(f"--gpus: {gpus} does not divide {shape.name}'s {shape.heads} heads")
    ep = gpus if ep is None else ep
    if ep < 1 or gpus % ep:
        raise HwProfileError(f"--ep: expected a divisor of --gpus {gpus}, got {ep}")
    if (B < 1).any() or (R < 1).any() or (R > B).any() or (c < 0).any():
        raise HwProfileError("kernel step times: need tokens >= requests >= 1 and context >= 0 per point")
    q = B / R
    gdtype = _gemm_dtype(shape, dtype)

    kind = shape.attention_kind
    if kind == GATED_DELTANET:  # its measured decode kernels at a prompt's B overprice it several times
        raise HwProfileError(f"kernel database: its Gated DeltaNet (linear attention) kernels are measured one token "
                             f"a sequence (decode) or one prompt at a time (prefill), not as the steps of a table, "
                             f"which price every token alike (docs/model.md), for {shape.name}")
    if kind in LINEAR_HYBRIDS:
        raise HwProfileError(f"kernel database: no Kimi Delta Attention (linear attention) kernels for {shape.name}")
    if kind == BLOCK_SPARSE:  # its GQA decode kernel would attend to the whole context
        raise HwProfileError(f"kernel database: no MiniMax sparse attention (block-selecting) kernels for {shape.name}")
    gemm = np.zeros(B.shape)
    gemm_list = dense_gemms(shape, gpus)
    if kind == COMPRESSED_SPARSE:
        attention = _v4_attention(ctx, shape, B, R, c)
    elif kind == DSA:
        attention = _dsa_attention(ctx, shape, B, R, c, gdtype)
    elif kind == MLA:
        attention, extra, module = _mla_attention(ctx, shape, R, q, c, B, gdtype)
        if module:  # the module row holds the projections; the swap in `extra` puts them at M = B
            gemm_list = [g for g in gemm_list if g[0] not in ("q_a+kv_a", "q_b", "o")]
            attention = attention * shape.layers + extra
        else:
            attention = attention * shape.layers
            gemm = gemm + extra
    else:  # per-head caches: MHA, GQA and sliding windows, whose windowed layers read their window at most
        local = shape.windowed_layers
        attention = _gqa_attention(ctx, shape, R, q, c) * (shape.layers - local)
        if local:
            attention = attention + _gqa_attention(ctx, shape, R, q, np.minimum(c, shape.sliding_window)) * local
    for name, n, k, count in gemm_list:
        gemm = gemm + _gemm(ctx, gdtype, B, n, k, name) * count
    parts = {GEMM: gemm, ATTENTION: attention}
    if shape.is_moe:
        parts[MOE] = _moe(ctx, shape, B, ep)
    if shape.hyper_connections:
        parts[MHC] = _mhc(ctx, shape, B)
    parts[COMM] = _allreduce(ctx, shape, B)
    parts[LM_HEAD] = (_gemm(ctx, "bfloat16", B, shape.vocab // gpus, shape.hidden, "LM head")
                        if shape.lm_head else np.zeros(B.shape))

    notes = [
        ("(a) Attention is priced per request: what grows with the context is read once per request (see the "
         "DeepSeek-V4 note), not q times as by q x R one-query sequences." if kind in (COMPRESSED_SPARSE, DSA) else
         "(a) Attention is priced per request: the decode kernel's time for R sequences over the context with q x "
         "the local query heads on the same KV heads (each request's KV read once, q x context of compute), not "
         "as q x R one-query sequences."),
        "(b) Lookups are multilinear in the measured axes (linear in batch, KV length, M, N, K, message size); past "
        "the last measured point the line through the last two points is continued (never below the value at the "
        "edge) and the point is marked not inside."
        + (" Extrapolated: " + ", ".join(f"{k} ({v} points)" for k, v in ctx.extrapolated.items()) + "."
           if ctx.extrapolated else " No point needed extrapolation."),
    ]
    if not any(n.startswith("(c)") for n in ctx.notes):
        notes.append(f"(c) No implausible GEMM floor found in the {gdtype} data used (checked against the other "
                     "engines' data for the same GPU).")
    notes += ctx.notes
    notes.append("Not priced here: norms, rotary, activation, embedding, sampling, launch and scheduler costs "
                 "(engine overheads are added elsewhere).")
    return ctx.times(parts, notes)

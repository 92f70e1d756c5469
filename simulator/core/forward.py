"""What one target forward costs: the one rule every step of the engine and of a prefill pool is priced by.

A forward is one pass over all of a step's tokens, decode, verify and prompt chunks together: they share its
GEMMs, so the GEMMs are priced once at the step's total tokens, where they are bound by the larger of the weight
read and the arithmetic (a 600-token chunk makes the step compute-bound and the decode tokens ride almost free).
Attention is priced per kind: decode and verify queries over their requests' contexts, a chunk over its prefix and
itself. On a table's T(B, K) (B new tokens reading K KV tokens):

    forward = T(decode + chunk tokens, K of the decoding rows)
              + the verify correction (``StepTimeGrid.verify_ms``: tokens per request other than the table priced)
              + the chunks' causal attention (``ChunkAttention``, the sidecar's ``prefill_cost`` block)

T is the grid's own rule, a staircase where the table records the engine's captured CUDA graphs (the step priced
at the size it is padded to; ``hw_profile.tables.cuda_graphs``).

A table without a chunk-attention block (a measured table: T(B, K) of whole forwards of decode shapes) places a
chunk on its axes as it is: its tokens in B and the prompt it has already cached in K, the KV it reads.

``StepCost`` is one step's price as the tokens a policy verifies vary: the engine builds it once per step, the
policy reads it as SPS(B) and the clock advances by it at the B the policy chose, so the two cannot disagree.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from hw_profile.tables.step_table import ChunkAttention, StepTimeGrid


class PricedOnGrid(Protocol):
    """An SPS(B) a compiled walker (the greedy) can price inside its walk instead of tabulating it: the grid's
    arrays and this step's terms (``StepCost.walk_terms``). The greedy recognises it by that method, so a
    researcher's own SPS with the same terms is walked the same way."""

    def walk_terms(self) -> tuple: ...


class StepCost:
    """One step's time as the verified tokens B vary (anchors included: B starts at the decoding rows):
    T(B + prefill, K) + V(B) + fixed ms, with this step's K, prompt tokens and fixed costs (draft, scheduling
    stall, the chunks' attention), and V the grid's correction for verifying B / rows tokens per request over the
    ``verify_kv`` KV tokens the decoding rows hold (``StepTimeGrid.verify_ms``; 0 for a table without the block).
    Called, it is SPS(B) = 1000 / ms (``PolicyView.sps``); ``draft`` is the drafter's cost model (``DraftCost``,
    already inside ``fixed_ms``), which a planner that profiles its own tables, as an engine does at startup,
    prices other shapes with."""

    __slots__ = ("draft", "fixed_ms", "grid", "kv", "prefill", "rows", "verify_kv")

    def __init__(self, grid: StepTimeGrid, kv: float, prefill: int, fixed_ms: float, rows: int = 0,
                 verify_kv: float = 0.0, draft: object | None = None):
        self.grid = grid
        self.kv = kv
        self.prefill = prefill
        self.fixed_ms = fixed_ms
        self.rows = rows
        self.verify_kv = verify_kv
        self.draft = draft

    def ms(self, batch: np.ndarray | float) -> np.ndarray:
        """Milliseconds of the step at ``batch`` verified tokens (an array, or one number)."""
        grid = self.grid
        if np.ndim(batch) == 0:  # the clock's one B: one compiled call
            t = grid.step_ms(batch + self.prefill, self.kv, self.rows, self.prefill > 0)
        else:
            t = grid.values(np.asarray(batch) + self.prefill, self.kv, self.rows, self.prefill > 0)
        if grid.verify is not None:  # added in the walk's order, so both price a step to the same bit
            t = t + grid.verify_ms(batch, self.rows, self.verify_kv)
        return t + self.fixed_ms

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        return 1000.0 / self.ms(batch)

    def walk_terms(self) -> tuple:
        """What a compiled walker needs to price the step at any B as ``ms`` does (``PricedOnGrid``): the grid's
        arrays, its CUDA-graph terms, K, prompt tokens, fixed ms, and the verify correction's terms with this
        step's rows and KV."""
        grid = self.grid
        verify = (*grid.verify_terms, float(self.rows), float(self.verify_kv))
        return (*grid.arrays, grid.graph_terms, float(self.kv), float(self.prefill), float(self.fixed_ms), verify)


class ForwardPrice:
    """The prompt chunks' part of the forward rule (module docstring) on one table, and the forwards of a prefill
    pool, which carry chunks alone: ``grid`` gives T(B, K), ``chunk`` the chunks' attention when the table's
    sidecar prices it (else None)."""

    def __init__(self, grid: StepTimeGrid, chunk: ChunkAttention | None):
        self.grid = grid
        self.chunk = chunk

    def chunk_terms(self, chunks: np.ndarray, cached: np.ndarray | None, held: int) -> tuple[int, float]:
        """What a forward's prompt chunks (``chunks`` tokens each, ``cached`` tokens held before them, ``held`` in
        all by the rows with a chunk) add: (KV tokens on T's K axis, ms beyond T). A table that prices chunks'
        attention (``ChunkAttention``) takes it apart, (0, their attention); on any other the prefix they hold is KV
        they read, (held, 0), and ``cached`` is not needed."""
        if self.chunk is None:
            return held, 0.0
        return 0, self.chunk.ms(chunks, cached)

    def prefill_ms(self, chunks: np.ndarray, cached: np.ndarray) -> float:
        """A forward of prompt chunks alone (a prefill pool's): ``chunks`` tokens whose prompts hold ``cached``."""
        c = np.asarray(chunks, dtype=np.int64)
        p = np.asarray(cached, dtype=np.int64)
        kv, extra = self.chunk_terms(c, p, int(p[c > 0].sum()))
        return self.grid.lookup(int(c.sum()), kv, int((c > 0).sum()), True) + extra

    def alone_ms(self, prompts: np.ndarray) -> np.ndarray:
        """Each prompt prefilled in a forward of its own with nothing cached, as an array (an unbounded pool)."""
        p = np.asarray(prompts, dtype=np.int64)
        t = np.asarray(self.grid.values(p.astype(np.float64), 0.0, 1.0, True), dtype=np.float64)
        return t if self.chunk is None else t + self.chunk.each_ms(p, np.zeros_like(p))

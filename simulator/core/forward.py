"""What one target forward costs: the one rule every step of the engine and of a prefill pool is priced by.

A forward is one pass over all of a step's tokens, decode, verify and prompt chunks together: they share its
GEMMs, so the GEMMs are priced once at the step's total tokens, where they are bound by the larger of the weight
read and the arithmetic (a 600-token chunk makes the step compute-bound and the decode tokens ride almost free).
Attention is priced per kind: decode and verify queries over their requests' contexts, a chunk over its prefix and
itself. On a table's T(B, K) (B new tokens reading K KV tokens):

    forward = T(decode + chunk tokens, K of the decoding rows)
              + the verify correction (``StepTimeGrid.verify_ms``: tokens per request other than the table priced)
              + the chunks' causal attention (``ChunkAttention``, the sidecar's ``prefill_cost`` block)

A table without a chunk-attention block (a measured table: T(B, K) of whole forwards of decode shapes) places a
chunk on its axes as it is: its tokens in B and the prompt it has already cached in K, the KV it reads.
"""

from __future__ import annotations

import numpy as np

from hw_profile.tables.step_table import ChunkAttention, StepTimeGrid


class ForwardPrice:
    """The one forward rule (module docstring) on one table: ``grid`` gives T(B, K), ``chunk`` the chunks'
    attention when the table's sidecar prices it (else None)."""

    def __init__(self, grid: StepTimeGrid, chunk: ChunkAttention | None):
        self.grid = grid
        self.chunk = chunk

    def ms(self, tokens: int, kv: float, decode_tokens: int = 0, rows: int = 0, kv_decode: float = 0.0) -> float:
        """T at the forward's ``tokens`` (all of them) and ``kv`` (the chunks' share from ``chunk_terms``
        included), plus the verify correction for ``decode_tokens`` decode/verify tokens of ``rows`` requests
        reading ``kv_decode``; the chunks' attention (``chunk_terms``) is the caller's to add, since it does not
        change with the tokens a policy picks."""
        grid = self.grid
        verify = grid.verify_ms(decode_tokens, rows, kv_decode) if rows and grid.verify is not None else 0.0
        return grid.lookup(tokens, kv) + verify

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
        return self.ms(int(c.sum()), kv) + extra

    def alone_ms(self, prompts: np.ndarray) -> np.ndarray:
        """Each prompt prefilled in a forward of its own with nothing cached, as an array (an unbounded pool)."""
        p = np.asarray(prompts, dtype=np.int64)
        t = np.asarray(self.grid.values(p.astype(np.float64), 0.0), dtype=np.float64)
        return t if self.chunk is None else t + self.chunk.each_ms(p, np.zeros_like(p))

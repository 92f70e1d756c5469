"""Per-request key/value caches kept in one padded tensor per layer, so R requests with different context
lengths run in one batched forward and each can be rolled back on its own.

Layout: keys[layer] is (R, kv_heads, capacity, head_dim); request r's valid entries are slots 0..lengths[r]-1.
Entries past a request's length are stale and masked out. "Rolling back" a rejected draft is therefore free: the
verification forward computes keys for every proposed token, and only the accepted prefix (plus the anchor) is
written back (``commit``).
"""

from __future__ import annotations

import torch


class PaddedKVCache:
    def __init__(self, n_layers: int, rows: int, kv_heads: int, capacity: int, head_dim: int,
                 device: torch.device | str, dtype: torch.dtype):
        shape = (rows, kv_heads, capacity, head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.lengths = torch.zeros(rows, dtype=torch.long, device=device)
        self.capacity = capacity

    @property
    def n_layers(self) -> int:
        return len(self.keys)

    def gather(self, rows: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """Keys and values of the given requests cut to their longest length, and a (R', maxlen) validity mask."""
        lengths = self.lengths[rows]
        width = int(lengths.max()) if rows.numel() else 0
        ks = [k[rows, :, :width] for k in self.keys]
        vs = [v[rows, :, :width] for v in self.values]
        valid = torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]
        return ks, vs, valid

    def commit(self, rows: torch.Tensor, new_keys: list[torch.Tensor], new_values: list[torch.Tensor],
               counts: torch.Tensor) -> None:
        """Append the first counts[i] of new_keys[layer][i] (shape (R', kv_heads, n, head_dim)) to request rows[i]."""
        n = new_keys[0].shape[2] if new_keys else 0
        take = torch.arange(n, device=counts.device)[None, :] < counts[:, None]  # (R', n)
        i_sel, j_sel = take.nonzero(as_tuple=True)
        r_sel = rows[i_sel]
        pos = self.lengths[r_sel] + j_sel
        if bool((pos >= self.capacity).any()):
            raise RuntimeError(f"KV cache capacity {self.capacity} exceeded")
        for layer in range(self.n_layers):
            self.keys[layer][r_sel, :, pos] = new_keys[layer][i_sel, :, j_sel].to(self.keys[layer].dtype)
            self.values[layer][r_sel, :, pos] = new_values[layer][i_sel, :, j_sel].to(self.values[layer].dtype)
        self.lengths[rows] += counts

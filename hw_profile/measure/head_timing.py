"""Time DSpark's per-position heads on the device a drafter table is measured on (``hw-profile sps
--drafter-layers N``), so that a measured DSpark table carries their cost as an analytic one does.

After the parallel backbone, DSpark drafts left to right: at each of the gamma positions every request's row takes
the Markov embedding of its previous token (rank values), multiplies it into the rank x vocab transition (the
bias on the backbone's logits) and scores its confidence from [hidden state; embedding] (one logit). One
position over R rows is what is timed here, with random weights of the target's vocabulary and width, for each
request count of the grid; the sidecar's ``sequential_head`` then holds

- ``per_position_ms``: one position at the smallest R (the weight-streaming floor, plus the launches),
- ``per_row_position_ms``: one position at the largest R, per row (the slope once the rows dominate),

which the simulator charges as gamma x max(per_position, per_row_position x rows), and ``measured_ms``, every R's
median. Positions run eagerly, one synchronised call each (no CUDA graph), as a sequential head without graph
capture does; the vocabulary projection of the sampled token is the backbone's LM head, already in the table.
"""

from __future__ import annotations

import time

import numpy as np


def time_dspark_heads(device: str, dtype: str, rank: int, vocab: int, hidden: int, rows: list[int],
                      repeats: int = 10, warmup: int = 2, seed: int = 0) -> dict:
    import torch

    from hw_profile.measure.model_builder import torch_dtype

    dt = torch_dtype(dtype)
    gen = torch.Generator().manual_seed(seed)
    w1 = torch.randn(vocab, rank, generator=gen).to(device, dt)  # Markov embedding of the previous token
    w2 = (torch.randn(rank, vocab, generator=gen) / rank**0.5).to(device, dt)  # the transition's second factor
    wc = (torch.randn(hidden + rank, 1, generator=gen) / (hidden + rank) ** 0.5).to(device, dt)  # confidence

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    measured = {}
    with torch.inference_mode():
        for r in sorted(set(rows)):
            prev = torch.randint(vocab, (r,), generator=gen).to(device)
            h = torch.randn(r, hidden, generator=gen).to(device, dt)

            def position(prev=prev, h=h):
                e = w1[prev]
                return e @ w2, torch.cat([h, e], dim=-1) @ wc

            for _ in range(max(warmup, 1)):
                position()
            sync()
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                position()
                sync()
                times.append((time.perf_counter() - t0) * 1e3)
            measured[r] = float(np.median(times))
    low, high = min(measured), max(measured)
    return {
        "per_position_ms": measured[low],
        "per_row_position_ms": measured[high] / high,
        "rank": rank,
        "confidence_head": hidden + rank,
        "measured_ms": {str(r): round(ms, 6) for r, ms in measured.items()},
        "timer": "time.perf_counter around one synchronised position (embedding, rank x vocab, confidence)",
    }

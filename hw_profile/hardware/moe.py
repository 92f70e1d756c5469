"""How many experts a batch touches, and what a mixture-of-experts layer reads per step.

Decode is weight-bandwidth bound, and an MoE layer reads only the experts that at least one token of the step was
routed to. With E routed experts, k per token and routing uniform and independent across tokens, a given expert is
missed by one token with probability 1 - k/E (a token picks k distinct experts), so by B tokens with probability
(1 - k/E)^B, and

    E[distinct experts touched by B tokens] = E x (1 - (1 - k/E)^B)

which is k at B = 1 and tends to E as B grows (DeepSeek-V3, E = 256, k = 8: about 164 experts at B = 32, 251 at
B = 128). Real routers are not uniform; skewed routing touches fewer experts, so this is the upper end for a given
B (DeepSeek's auxiliary-loss-free balancing keeps V3 close to uniform over a batch).

Expert parallelism over ``ep`` groups puts E/ep experts on each group; the same argument gives
(E/ep) x (1 - (1 - k/E)^B) distinct experts per group, and the step waits for the busiest group, whose load this
expectation does not include (imbalance is not modelled).
"""

from __future__ import annotations

import numpy as np


def expected_distinct_experts(
    tokens: np.ndarray | float, experts: int, per_token: int, ep: int = 1
) -> np.ndarray:
    """Expected number of distinct routed experts, per expert-parallel group, that ``tokens`` tokens touch.

    tokens: any shape (B per step); returns the same shape, float."""
    if experts <= 0:
        return np.zeros_like(np.asarray(tokens, dtype=float))
    if not 0 < per_token <= experts:
        raise ValueError(f"experts per token must be in 1..{experts}, got {per_token}")
    b = np.asarray(tokens, dtype=float)
    miss = (1.0 - per_token / experts) ** np.maximum(b, 0.0)
    return (experts / ep) * (1.0 - miss)


def routed_weight_params(shape, tokens: np.ndarray | float, gpus: int = 1, ep: int | None = None) -> np.ndarray:
    """Routed-expert parameters one GPU reads in a step of ``tokens`` tokens, all MoE layers.

    Experts are split over ``ep`` expert-parallel groups of gpus/ep GPUs each, and tensor-parallel inside a group,
    so a GPU holds E/ep experts, each cut gpus/ep ways."""
    if not shape.is_moe:
        return np.zeros_like(np.asarray(tokens, dtype=float))
    ep = gpus if ep is None else ep
    distinct = expected_distinct_experts(tokens, shape.experts, shape.experts_per_token, ep=ep)
    return shape.moe_layers * distinct * shape.expert_params / (gpus / ep)

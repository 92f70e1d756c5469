"""Turning logits into the probabilities that verification compares and into sampled tokens.

Temperature 0 means greedy: the token is the argmax and the "distribution" is one-hot on it, which is what
rejection sampling reduces to at temperature 0."""

from __future__ import annotations

import torch


def probs_from_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits.float()
    if temperature <= 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return torch.softmax(logits / temperature, dim=-1)


def sample_tokens(logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of logits (..., V) -> (...)."""
    if temperature <= 0:
        return logits.argmax(-1)
    probs = probs_from_logits(logits, temperature)
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])

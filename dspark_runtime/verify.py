"""Lossless verification of draft blocks: standard speculative rejection sampling, batched over requests.

Each request r drafted gamma tokens x_1..x_gamma from the drafter's distributions q_1..q_gamma; the target, run
once on the block, gives p_1..p_{gamma+1} (p_j is its distribution for token j, p_{gamma+1} the bonus position).
Only the first lengths[r] draft tokens are verified (the scheduler's choice, 0..gamma). Left to right, x_j is
accepted with probability min(1, p_j(x_j) / q_j(x_j)); at the first rejection the request emits one token from
normalise(max(0, p_j - q_j)); if all lengths[r] tokens pass it emits a bonus token from p_{lengths[r]+1}. Whatever
the lengths, as long as they were chosen without looking at the tokens being verified, the emitted tokens are
distributed exactly as the target would sample them (Leviathan et al. 2023; Chen et al. 2023).

At temperature 0 (greedy=True) a token is accepted iff it is the target's argmax and the emitted token is the
argmax of the target at the first mismatch (or the bonus position).

All of it is tensor work over (R, gamma): no Python loop over requests or tokens, on whatever device the inputs
live, and reproducible given the torch.Generator (which must live on that device).
"""

from __future__ import annotations

import torch


def verify_block(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    lengths: torch.Tensor,
    generator: torch.Generator | None = None,
    greedy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify R draft blocks at once.

    target_probs: (R, gamma+1, V) target distributions; position j is the distribution of draft token j+1, the
                  position after the last verified token gives the bonus.
    draft_probs:  (R, gamma, V) the drafter's distributions q_j the tokens were sampled from (unused if greedy).
    draft_tokens: (R, gamma) long.
    lengths:      (R,) long in 0..gamma, how many leading draft tokens are verified.

    Returns (accepted, next_token): accepted (R,) long in 0..lengths[r], the number of draft tokens kept, and
    next_token (R,) long, the token the target adds after them (correction or bonus). Request r emits
    draft_tokens[r, :accepted[r]] followed by next_token[r].
    """
    accepted, next_token, _ = verify_block_full(target_probs, draft_probs, draft_tokens, lengths, generator, greedy)
    return accepted, next_token


def verify_block_full(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    lengths: torch.Tensor,
    generator: torch.Generator | None = None,
    greedy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``verify_block`` that also returns ``full`` (R,): the draft tokens the same draws would have accepted had all
    gamma been verified. The tests are sequential and each uses its own uniform, so cutting the run of passes at
    lengths[r] (what is emitted) leaves the output's law unchanged; ``full`` is what a recorded trace stores."""
    rows, gamma = _check_shapes(target_probs, draft_probs, draft_tokens, lengths)
    device = target_probs.device
    if rows == 0:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return empty, empty.clone(), empty.clone()
    # Low-precision probabilities (bf16/fp16 on a GPU) lose too much in p - q; do the arithmetic in float32.
    work = torch.float32 if target_probs.dtype in (torch.float16, torch.bfloat16) else target_probs.dtype
    p_all = target_probs.to(work)
    lengths = lengths.to(device=device, dtype=torch.long)
    tokens = draft_tokens.to(device=device, dtype=torch.long)

    if greedy:
        ok = tokens == p_all[:, :gamma].argmax(dim=-1)
    else:
        q_all = draft_probs.to(device=device, dtype=work)
        p_x = p_all[:, :gamma].gather(2, tokens.unsqueeze(-1)).squeeze(-1)
        q_x = q_all.gather(2, tokens.unsqueeze(-1)).squeeze(-1)
        u = torch.rand((rows, gamma), generator=generator, device=device, dtype=work)
        # u < p/q written without the division: u in [0, 1), so q = 0 < p accepts and p = 0 never does (not even
        # with q = 0 too). p >= q is spelled out so that rounding in u * q never rejects a certain acceptance.
        ok = (u * q_x < p_x) | ((p_x >= q_x) & (p_x > 0))
    # Accepted = the run of leading passes, cut at the verified length.
    leading = torch.cumprod(ok.to(torch.long), dim=1).sum(dim=1)
    accepted = torch.minimum(leading, lengths)

    rows_idx = torch.arange(rows, device=device)
    p_next = p_all[rows_idx, accepted]  # (R, V): target at the position after the kept prefix
    if greedy:
        return accepted, p_next.argmax(dim=-1), leading

    rejected = accepted < lengths
    if gamma > 0:
        q_next = q_all[rows_idx, accepted.clamp(max=gamma - 1)]
        residual = (p_next - q_next).clamp(min=0.0)
        # A rejection implies p(x) < q(x), so the residual has positive mass in exact arithmetic; if rounding
        # leaves none (p == q up to float error) the residual's limit is p itself.
        usable = residual.sum(dim=-1, keepdim=True) > 0
        residual = torch.where(usable, residual, p_next)
        dist = torch.where(rejected.unsqueeze(-1), residual, p_next)
    else:
        dist = p_next
    next_token = torch.multinomial(dist, 1, generator=generator).squeeze(-1)
    return accepted, next_token, leading


def _check_shapes(target_probs, draft_probs, draft_tokens, lengths) -> tuple[int, int]:
    if target_probs.dim() != 3:
        raise ValueError(f"target_probs must be (R, gamma+1, V), got shape {tuple(target_probs.shape)}")
    rows, g1, vocab = target_probs.shape
    gamma = g1 - 1
    if gamma < 0:
        raise ValueError("target_probs needs at least one position (gamma + 1 >= 1)")
    if tuple(draft_probs.shape) != (rows, gamma, vocab):
        raise ValueError(f"draft_probs must be {(rows, gamma, vocab)}, got {tuple(draft_probs.shape)}")
    if tuple(draft_tokens.shape) != (rows, gamma):
        raise ValueError(f"draft_tokens must be {(rows, gamma)}, got {tuple(draft_tokens.shape)}")
    if tuple(lengths.shape) != (rows,):
        raise ValueError(f"lengths must be ({rows},), got {tuple(lengths.shape)}")
    if rows and (int(lengths.min()) < 0 or int(lengths.max()) > gamma):
        raise ValueError(f"lengths must lie in 0..{gamma}, got {int(lengths.min())}..{int(lengths.max())}")
    return rows, gamma

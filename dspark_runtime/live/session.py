"""The real half of hardware in the loop: a fixed pool of request slots with real target and drafter caches, and
one replica step as batched forwards (prefill of newcomers, one drafting forward, one verification forward).

Slots are rows of one ``PaddedKVCache`` (target) and one drafter context, plus ``seq`` (slots, capacity): the
request's tokens (prompt, then everything emitted). A slot is taken when a request first decodes and given back
when it finishes or is preempted; a preempted request keeps its tokens outside the pool and is recomputed (its
prompt and emitted tokens prefilled again) when it decodes next, as vLLM's recompute preemption does.

One step, for the R slots a replica decodes:
1. ``prefill``: the slots that hold no cache yet run their context in one batched forward and sample their next
   token (a fresh request's first token; a recomputed request's next one, as the engine counts it);
2. ``draft``: one drafting forward for all R (gamma tokens each, raw confidences);
3. ``verify``: one target forward over [anchor, x_1..x_l] of exactly the chosen prefixes, then batched rejection
   sampling (``verify.verify_block_full``); only the anchor and the accepted tokens are committed (the rollback).
   With ``full=True`` the tokens past each chosen prefix also go through the target, in a second forward that is
   not timed and whose cache entries are dropped, so the step also knows how many tokens the whole block would
   have kept (what a trace records). The emitted tokens are the same either way: the tests are sequential and
   each position has its own uniform.

Every tensor operation is across the batch; Python loops run over draft positions (at most gamma) or over the
newcomers' prompts when they are copied in, never around a model forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..kvcache import PaddedKVCache
from ..sampling import probs_from_logits, sample_tokens
from ..target import TargetRunner
from ..verify import verify_block_full
from .timing import StepTimer


@dataclass
class Drafted:
    """One step's drafts for slots ``slots`` (R,): tokens (R, gamma), drafter probabilities (R, gamma, V), raw
    confidences (R, gamma) float32 on the host, or None for a drafter without a confidence head."""

    slots: torch.Tensor
    tokens: torch.Tensor
    draft_probs: torch.Tensor
    raw: torch.Tensor | None


@dataclass
class Verified:
    """The outcome per slot (host tensors, (R,) each): ``accepted`` draft tokens kept (bonus excluded, cut after an
    accepted EOS), ``emitted`` tokens appended (accepted + 1, or up to and including an accepted EOS), ``ended``
    the request emitted EOS, ``full`` what verifying the whole block would have kept (cut after EOS; only with
    full=True, else None), ``kv_read`` the context tokens the verification read, ``verified`` sum of l + 1."""

    accepted: torch.Tensor
    emitted: torch.Tensor
    ended: torch.Tensor
    full: torch.Tensor | None
    kv_read: int
    verified: int


class LiveBatch:
    def __init__(self, runner: TargetRunner, drafter, *, slots: int, capacity: int, temperature: float,
                 eos_id: int | None, generator: torch.Generator, timer: StepTimer):
        self.runner = runner
        self.drafter = drafter
        self.gamma = int(drafter.gamma) if drafter is not None else 0
        self.temperature = float(temperature)
        self.eos_id = eos_id
        self.gen = generator
        self.timer = timer
        self.capacity = capacity
        dev = runner.device
        self.device = dev
        self.tcache: PaddedKVCache = runner.new_cache(slots, capacity)
        self.dctx = drafter.new_context(slots, capacity) if drafter is not None else None
        self.seq = torch.zeros(slots, capacity, dtype=torch.long, device=dev)
        self.seq_len = torch.zeros(slots, dtype=torch.long, device=dev)
        self.anchor = torch.zeros(slots, dtype=torch.long, device=dev)

    # --- slots ------------------------------------------------------------------------------------------------
    def load(self, slots: torch.Tensor, contexts: list[list[int]]) -> None:
        """Put requests into free slots: contexts[i] is prompt + emitted tokens (a fresh request: the prompt)."""
        self.seq_len[slots] = torch.tensor([len(c) for c in contexts], device=self.device)
        width = max(len(c) for c in contexts)
        rows = torch.zeros(len(contexts), width, dtype=torch.long)
        for i, c in enumerate(contexts):
            rows[i, : len(c)] = torch.tensor(c, dtype=torch.long)
        self.seq[slots, :width] = rows.to(self.device)
        self.tcache.lengths[slots] = 0
        if self.dctx is not None:
            self.dctx.lengths[slots] = 0

    def release(self, slots: torch.Tensor) -> None:
        self.tcache.lengths[slots] = 0
        if self.dctx is not None:
            self.dctx.lengths[slots] = 0

    def tokens(self, slot: int, start: int = 0) -> list[int]:
        return self.seq[slot, start : int(self.seq_len[slot])].tolist()

    # --- the step ---------------------------------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, slots: torch.Tensor, forced: torch.Tensor | None = None) -> torch.Tensor:
        """Run the contexts of slots that hold no cache through the target in one forward and sample each one's
        next token from it (a fresh request's first token; after a recompute preemption the token the recompute
        emits, as vLLM's does). ``forced`` (R,): a token >= 0 is taken as that slot's next token instead of the
        sampled one (a first token a disaggregated pool already emitted). Returns (R,) bool on the host: the
        token is EOS."""
        dev = self.device
        counts = self.seq_len[slots].clone()
        width = int(counts.max())
        cols = torch.arange(width, device=dev)
        tokens = torch.where(cols[None, :] < counts[:, None], self.seq[slots, :width], 0)
        with self.timer.span("prefill"):
            logits, feats, nk, nv = self.runner.forward(self.tcache, slots, tokens, counts, logits_at=counts - 1)
        self.tcache.commit(slots, nk, nv, counts)
        first = sample_tokens(logits, self.temperature, self.gen)
        if forced is not None:
            first = torch.where(forced.to(first.device) >= 0, forced.to(first.device), first)
        self.anchor[slots] = first
        self.seq[slots, counts] = first
        self.seq_len[slots] = counts + 1
        if self.drafter is not None:
            # position j's entry pairs its features with the token at j + 1 (the autoregressive drafter reads it)
            r = slots.numel()
            after = torch.zeros(r, width, dtype=torch.long, device=dev)
            after[:, : width - 1] = tokens[:, 1:]
            after[torch.arange(r, device=dev), counts - 1] = first
            with self.timer.span("prefill"):
                self.drafter.add_context(self.dctx, slots, feats, after, counts)
        if self.eos_id is None:
            return torch.zeros(slots.numel(), dtype=torch.bool)
        return (first == self.eos_id).cpu()

    @torch.no_grad()
    def draft(self, slots: torch.Tensor) -> Drafted:
        with self.timer.span("draft"):
            prop = self.drafter.propose(self.dctx, slots, self.anchor[slots], self.temperature, self.gen)
        q = probs_from_logits(prop.logits, self.temperature)
        raw = None if prop.confidence_logits is None else torch.sigmoid(prop.confidence_logits).float().cpu()
        return Drafted(slots, prop.tokens, q, raw)

    @torch.no_grad()
    def verify(self, slots: torch.Tensor, drafted: Drafted | None, lengths: torch.Tensor, full: bool) -> Verified:
        """Verify the first lengths[r] drafts of each slot (0 everywhere, with no drafter: plain decoding)."""
        dev, g, runner = self.device, self.gamma, self.runner
        r = slots.numel()
        idx = torch.arange(r, device=dev)
        lengths = lengths.to(dev)
        width = int(lengths.max()) if r else 0
        anchors = self.anchor[slots]
        drafts = drafted.tokens[:, :width] if drafted is not None else torch.zeros(r, 0, dtype=torch.long, device=dev)
        block = torch.cat([anchors[:, None], drafts], dim=1)
        counts = lengths + 1
        kv_read = int(self.tcache.lengths[slots].sum())
        with self.timer.span("verify"):
            logits, feats, nk, nv = runner.forward(self.tcache, slots, block, counts)
        p = probs_from_logits(logits, self.temperature)  # (R, width + 1, V)
        if full and drafted is not None:
            p = self._whole_block(slots, drafted, lengths, p, nk, nv, counts)
            q, x = drafted.draft_probs, drafted.tokens
        else:
            q = drafted.draft_probs[:, :width] if drafted is not None else p.new_zeros(r, 0, p.shape[-1])
            x = drafts
        accepted, nxt, whole = verify_block_full(p, q, x, lengths, generator=self.gen, greedy=self.temperature <= 0)
        self.tcache.commit(slots, nk, nv, accepted + 1)
        after = torch.cat([drafts, torch.zeros_like(nxt)[:, None]], dim=1)  # the tokens emitted, in place
        after[idx, accepted] = nxt
        if self.drafter is not None:
            with self.timer.span("draft"):
                self.drafter.add_context(self.dctx, slots, feats, after, accepted + 1)
        self.anchor[slots] = nxt
        emitted = accepted + 1
        ended = torch.zeros(r, dtype=torch.bool, device=dev)
        if self.eos_id is not None:
            eos = after == self.eos_id
            eos &= torch.arange(width + 1, device=dev)[None, :] < emitted[:, None]
            ended = eos.any(dim=1)
            first = eos.to(torch.long).argmax(dim=1)
            emitted = torch.where(ended, first + 1, emitted)
            accepted = torch.where(ended & (first < accepted), first + 1, accepted)
            if full and drafted is not None:
                xe = (drafted.tokens == self.eos_id) & (torch.arange(g, device=dev)[None, :] < whole[:, None])
                whole = torch.where(xe.any(dim=1), xe.to(torch.long).argmax(dim=1) + 1, whole)
        # append the emitted tokens to each request's sequence
        cols = torch.arange(width + 1, device=dev)[None, :]
        keep = cols < emitted[:, None]
        i_sel, j_sel = keep.nonzero(as_tuple=True)
        self.seq[slots[i_sel], self.seq_len[slots[i_sel]] + j_sel] = after[i_sel, j_sel]
        self.seq_len[slots] += emitted
        return Verified(accepted.cpu(), emitted.cpu(), ended.cpu(), whole.cpu() if full else None, kv_read,
                        int(counts.sum()))

    def _whole_block(self, slots, drafted: Drafted, lengths, p, nk, nv, counts) -> torch.Tensor:
        """Target distributions at every block position (R, gamma + 1, V): the chosen prefix's from ``p``, the rest
        from an untimed forward over the unchosen drafts on top of a provisional commit that is then rolled back."""
        dev, g = self.device, self.gamma
        r = slots.numel()
        whole = p.new_zeros(r, g + 1, p.shape[-1])
        whole[:, : p.shape[1]] = p
        rest = torch.nonzero(lengths < g, as_tuple=True)[0]
        if rest.numel() == 0:
            return whole
        self.tcache.commit(slots, nk, nv, counts)
        l_rest = lengths[rest]
        span = g - int(l_rest.min())
        offs = torch.arange(span, device=dev)
        take = (l_rest[:, None] + offs[None, :]).clamp(max=g - 1)
        tail = drafted.tokens[rest].gather(1, take)
        logits, _, _, _ = self.runner.forward(self.tcache, slots[rest], tail, g - l_rest)
        self.tcache.lengths[slots] -= counts  # the rollback: nothing provisional stays
        tail_p = probs_from_logits(logits, self.temperature)
        for k in range(span):  # draft positions, not requests
            pos = l_rest + 1 + k
            ok = pos <= g
            whole[rest[ok], pos[ok]] = tail_p[ok, k]
        return whole

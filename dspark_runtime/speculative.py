"""Speculative decoding of a batch of requests with a real target and drafter: draft, verify in one batched target
forward, keep the accepted prefix, roll back the rest, emit the correction or bonus token.

Per step, for the R' requests still running:
1. the drafter proposes gamma tokens per request (and raw confidences when it has a head);
2. ``plan`` chooses how many of them each request verifies, l[r] in 0..gamma (default: the full block);
3. the target runs [anchor, x_1..x_gamma] of every request in one forward on top of its cached context
   (``TargetRunner.forward``; positions past 1 + l[r] are padding);
4. ``verify_block`` (standard rejection sampling, greedy at temperature 0) gives the accepted count a[r] and the
   next token;
5. the target cache keeps anchor + a[r] entries (the rejected ones are never committed: that is the rollback),
   the drafter's context gains the target features of those positions, and the next token becomes the anchor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .sampling import probs_from_logits, sample_tokens
from .target import TargetRunner
from .verify import verify_block


@dataclass
class BlockRecord:
    """One request-step: ``accepted`` draft tokens accepted (bonus excluded) out of ``verified``; the drafter's raw
    confidences (gamma,) or None."""

    request: int
    step: int
    accepted: int
    verified: int
    confidence: np.ndarray | None


def _pad(rows: list[list[int]], fill: int, device) -> torch.Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows)), fill, dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long, device=device)
    return out


class SpeculativeDecoder:
    def __init__(self, runner: TargetRunner, drafter, *, temperature: float, eos_id: int | None,
                 generator: torch.Generator | None = None):
        self.runner = runner
        self.drafter = drafter
        self.gamma = drafter.gamma
        self.temperature = temperature
        self.eos_id = eos_id
        self.generator = generator

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new: int,
                 plan: Callable[[torch.Tensor | None, torch.Tensor], torch.Tensor] | None = None
                 ) -> tuple[list[list[int]], list[BlockRecord]]:
        """Decode every prompt to EOS or ``max_new`` tokens. ``plan(confidence (R', gamma) or None, rows)`` may
        return per-request verify lengths; without it every step verifies the full block."""
        runner, drafter, g = self.runner, self.drafter, self.gamma
        dev = runner.device
        r = len(prompts)
        capacity = max(len(p) for p in prompts) + max_new + g + 2
        rows = torch.arange(r, device=dev)
        tcache = runner.new_cache(r, capacity)
        logits, feats = runner.prefill(tcache, rows, prompts)
        anchors = sample_tokens(logits, self.temperature, self.generator)
        outputs = [[int(a)] for a in anchors.tolist()]
        dctx = drafter.new_context(r, capacity)
        lens = torch.tensor([len(p) for p in prompts], device=dev)
        feat_pad = torch.zeros(r, int(lens.max()), feats[0].shape[-1], device=dev, dtype=feats[0].dtype)
        for i, f in enumerate(feats):
            feat_pad[i, : f.shape[0]] = f
        after = _pad([[*p[1:], int(a)] for p, a in zip(prompts, anchors.tolist(), strict=True)], 0, dev)
        drafter.add_context(dctx, rows, feat_pad, after, lens)

        records: list[BlockRecord] = []
        step = 0
        active = rows[[not self._done(o, max_new) for o in outputs]]
        while active.numel():
            prop = drafter.propose(dctx, active, anchors[active], self.temperature, self.generator)
            conf = torch.sigmoid(prop.confidence_logits) if prop.confidence_logits is not None else None
            lengths = (torch.full((active.numel(),), g, dtype=torch.long, device=dev) if plan is None
                       else plan(conf, active).to(dev).long())
            width = int(lengths.max())  # no request verifies more: cut the padded block there
            drafts = prop.tokens[:, :width]
            block = torch.cat([anchors[active][:, None], drafts], dim=1)
            tlogits, tfeats, nk, nv = runner.forward(tcache, active, block, lengths + 1)
            accepted, nxt = verify_block(probs_from_logits(tlogits, self.temperature),
                                         probs_from_logits(prop.logits[:, :width], self.temperature), drafts,
                                         lengths, generator=self.generator, greedy=self.temperature <= 0)
            tcache.commit(active, nk, nv, accepted + 1)
            after = torch.cat([drafts, torch.zeros_like(nxt)[:, None]], dim=1)
            after[torch.arange(active.numel(), device=dev), accepted] = nxt
            drafter.add_context(dctx, active, tfeats, after, accepted + 1)
            anchors[active] = nxt
            acc_list, nxt_list, toks = accepted.tolist(), nxt.tolist(), prop.tokens.tolist()
            conf_np = conf.float().cpu().numpy() if conf is not None else None
            for i, req in enumerate(active.tolist()):
                drafts = toks[i][: acc_list[i]]
                kept = acc_list[i]
                if self.eos_id is not None and self.eos_id in drafts:  # an accepted EOS ends the answer there
                    kept = drafts.index(self.eos_id) + 1
                    drafts = drafts[:kept]
                    outputs[req].extend(drafts)
                else:
                    outputs[req].extend([*drafts, nxt_list[i]])
                records.append(BlockRecord(req, step, kept, int(lengths[i]),
                                           None if conf_np is None else conf_np[i]))
            step += 1
            active = active[[not self._done(outputs[i], max_new) for i in active.tolist()]]
        for i, o in enumerate(outputs):
            outputs[i] = self._trim(o, max_new)
        return outputs, records

    def _done(self, out: list[int], max_new: int) -> bool:
        return len(out) >= max_new or (self.eos_id is not None and self.eos_id in out)

    def _trim(self, out: list[int], max_new: int) -> list[int]:
        if self.eos_id is not None and self.eos_id in out:
            out = out[: out.index(self.eos_id) + 1]
        return out[:max_new]

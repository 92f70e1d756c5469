"""Drafters: what each proposes per step and what the proposal costs.

The drafter fixes the proposal length gamma and the draft cost; its acceptance comes from the acceptance source
(a profile's entry of the same name). Costs are looked up in a drafter cost table T_d(B, K) (a generic
transformer of the drafter's shape, see tools/embedded.py):

- parallel drafters (``dspark``, ``dflash``) run one pass over the block for every request: B = R x block tokens.
  DSpark feeds gamma tokens (anchor + gamma-1 masks, paper 3.1); DFlash the anchor plus gamma masks. DSpark then
  runs its sequential Markov head once per position, a small cost recorded with its table.
- autoregressive drafters (``eagle3``, ``mtp``) run gamma passes of one token per request, the first of them over
  the tokens the target took in the step before, to keep the drafter's cache up to date: vLLM's proposer over
  every token the target processed (verified tokens and prompt chunks), SGLang's draft extend over the accepted
  ones and prompt chunks (``takes_in``). Its head runs over one row per request, so the extra tokens pay the
  table's per-token cost less the head's share (``first_pass_share``). MTP-k is such a chain: the engines (vLLM's
  ``num_speculative_tokens``, SGLang's ``speculative-num-steps``) run DeepSeek's one MTP module
  (``num_nextn_predict_layers`` = 1) k times, each pass proposing the next token from the one before, so its table
  (a forward of the module's layer and LM head) is priced k times, not once over a block.
- EAGLE-3 first projects three of the target's hidden states into one for every token its first pass takes in,
  and DFlash five, then the K and V of that feature in each of its layers (the context its block attends to): a
  pass's cost over those tokens without context, scaled by those weights over a pass's (``fusion_share``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hw_profile.tables.step_table import StepTimeGrid


@dataclass(frozen=True)
class DrafterKind:
    name: str
    description: str
    fixed_gamma: int | None  # none: 0 (it drafts nothing); the others draft the gamma a scenario asks
    parallel: bool
    extra_block_tokens: int = 0
    # gamma of a system that gives none: None takes the scenario drafter's (``drafter.gamma``); MTP's 1, so that
    # naming the drafter alone keeps MTP-1, DeepSeek-V3's production setting
    default_gamma: int | None = None


DRAFTER_KINDS: dict[str, DrafterKind] = {
    "none": DrafterKind("none", "no drafter: plain autoregressive decoding", 0, parallel=False),
    "mtp": DrafterKind("mtp", "one-layer MTP module (DeepSeek-V3), chained gamma passes (MTP-k), default 1", None,
                       parallel=False, default_gamma=1),
    "dspark": DrafterKind("dspark", "DSpark: parallel backbone + Markov head + confidence head", None,
                          parallel=True),
    "dflash": DrafterKind("dflash", "DFlash: parallel backbone, no sequential or confidence head", None,
                          parallel=True, extra_block_tokens=1),
    "eagle3": DrafterKind("eagle3", "Eagle3-style one-layer autoregressive drafter", None, parallel=False),
}


@dataclass(frozen=True)
class DraftCost:
    kind: DrafterKind
    grid: StepTimeGrid | None
    seq_per_position_ms: float = 0.0
    seq_per_row_position_ms: float = 0.0
    attention_window: int = 0  # sliding-window drafter: each request's drafter reads at most this many KV tokens
    first_pass_share: float = 1.0  # of a pass's per-token cost, what is not the head (hw_profile.tables.sidecar.DrafterFacts)
    takes_in: str = "processed"  # what the first pass takes in: "processed" (vLLM) or "accepted" (SGLang) tokens
    fusion_share: float = 0.0  # weights run over the taken-in tokens over a pass's (hw_profile.tables.sidecar.DrafterFacts)

    def ms(self, rows: int, gamma: int, kv_tokens: float, fed: int = 0) -> float:
        """Milliseconds to draft gamma tokens for each of ``rows`` requests holding ``kv_tokens`` in total, an
        autoregressive drafter's first pass, and a drafter's fusion of the target's states, also taking in the
        ``fed`` tokens of the step before (``takes_in``, module docstring; 0 or fewer than ``rows``: one a
        request)."""
        if self.grid is None or rows == 0 or gamma == 0:
            return 0.0
        if self.attention_window:
            kv_tokens = min(kv_tokens, rows * self.attention_window)
        fusion = self.fusion_share * self._pass(max(fed, rows), rows, 0.0) if self.fusion_share else 0.0
        if self.kind.parallel:
            tokens = rows * (gamma + self.kind.extra_block_tokens)
            t = self.grid.lookup(tokens, kv_tokens, rows) + self._per_request(tokens, rows, kv_tokens)
            return t + gamma * max(self.seq_per_position_ms, self.seq_per_row_position_ms * rows) + fusion
        one = self._pass(rows, rows, kv_tokens)
        extra = (max(self._pass(fed, rows, kv_tokens) - one, 0.0) * self.first_pass_share
                 if fed > rows and self.first_pass_share else 0.0)
        return gamma * one + extra + fusion

    def _pass(self, tokens: int, rows: int, kv_tokens: float) -> float:
        return self.grid.lookup(tokens, kv_tokens, rows) + self._per_request(tokens, rows, kv_tokens)

    def _per_request(self, tokens: int, rows: int, kv_tokens: float) -> float:
        """The table's correction for the tokens per request a pass computes (a block of them, or one) where its
        sidecar says how it priced them (``StepTimeGrid.verify_ms``), else 0."""
        return self.grid.verify_ms(tokens, rows, kv_tokens) if self.grid.verify is not None else 0.0

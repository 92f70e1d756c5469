"""The example acceptance source of docs/adding-an-acceptance-source.md.

Every draft token survives verification with the same probability alpha, independently of the others (the
i.i.d. model under which speculative decoding's expected block length was first derived), and the drafter reports
alpha itself as its confidence: a perfectly calibrated head that cannot tell easy tokens from hard ones. alpha may
differ per workload mix entry (``alpha: {math: 0.9, chat: 0.6}``).
"""

import numpy as np

from simulator import AcceptanceSource, GrowingArrays, Proposal


class GeometricSource(AcceptanceSource):
    draws_outcome = True  # propose() draws the accepted prefix in advance, so the oracle can run on it

    def __init__(self, *, scenario, drafter, gamma, mix, calibrated, rng, alpha=0.8):
        rates = alpha if isinstance(alpha, dict) else dict.fromkeys(mix, alpha)
        missing = [key for key in mix if key not in rates]
        if missing:
            raise ValueError(f"alpha has no rate for mix entry {missing[0]!r}")
        if not all(0.0 <= float(rates[key]) < 1.0 for key in mix):
            raise ValueError(f"alpha must lie in [0, 1), got {alpha!r}")
        self.gamma = gamma
        self.rng = rng  # all randomness comes from here: runs are reproducible per seed
        self.rate_of_mix = np.array([float(rates[key]) for key in mix])
        self.state = GrowingArrays(alpha=np.float64)  # per request id

    def attach(self, ids, mix_index):
        if len(ids):
            self.state.ensure(int(ids.max()))
            self.state.alpha[ids] = self.rate_of_mix[mix_index]

    def propose(self, ids):
        alpha = self.state.alpha[ids][:, None]  # (R, 1)
        survives = self.rng.random((len(ids), self.gamma)) < alpha
        outcome = np.logical_and.accumulate(survives, axis=1).sum(axis=1)  # (R,) leading survivors
        confidence = np.broadcast_to(alpha, (len(ids), self.gamma))
        return Proposal(confidence=confidence, outcome=outcome)

    def verify(self, proposal, lengths):
        # verifying l tokens accepts the first min(l, outcome) of them
        return np.minimum(lengths, proposal.outcome)

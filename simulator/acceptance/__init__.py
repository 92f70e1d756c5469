"""Acceptance sources: who decides how many draft tokens the target accepts.

The engine talks to a source through four calls, always with arrays across the batch:

- ``attach(ids, mix_index)`` when requests are created: ids (n,) request ids, mix_index (n,) the index of each
  request's entry in the workload's mix (a domain such as ``math`` or a benchmark such as ``gsm8k``);
- ``propose(ids) -> Proposal`` each step for the decoding requests: confidences (R, gamma) the policy sees, and,
  where the source can draw it in advance, the accepted prefix if the whole block were verified;
- ``verify(proposal, lengths) -> accepted`` (R,) after the policy chose lengths (R,);
- ``detach(ids)`` when requests finish.

Built in: ``profile`` (statistical, fitted to the paper) and ``trace`` (replay of recorded verifications, e.g.
exported by ``dspark eval``). A scenario may name any other class by import string (``package.module:Class``),
which is how the torch runtime plugs in without the simulator importing it.
"""

from simulator.acceptance.base import AcceptanceSource, Proposal

__all__ = ["AcceptanceSource", "Proposal"]

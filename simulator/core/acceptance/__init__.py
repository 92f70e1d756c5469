"""Acceptance sources: who decides how many draft tokens the target accepts.

The engine talks to every source through four calls, always with arrays across the batch:

- ``attach(ids, mix_index)`` when requests are created: ids (n,) request ids, mix_index (n,) the index of each
  request's entry in the workload's mix (a domain such as ``math`` or a benchmark such as ``gsm8k``);
- ``propose(ids) -> Proposal`` each step for the decoding requests: confidences (R, gamma) the policy sees, and,
  where the source can draw it in advance, the accepted prefix if the whole block were verified;
- ``verify(proposal, lengths) -> accepted`` (R,) after the policy chose lengths (R,);
- ``detach(ids)`` when requests finish.

A source that knows where requests end before they run (a replayed live trace, a profile fitted to one;
``ends.py``) also answers ``end_positions(ids)`` after ``attach``; the base class's default says it does not.

Sources that generate real tokens (the runtime's ``live``, hardware in the loop; docs/hil.md) subclass the
extension ``runtime.RuntimeSource``: they hear of completed prefills (``prefilled``, ``prefilled_elsewhere``) and
preemptions (``preempt``), end requests at EOS through ``Proposal.ended``, may serve the drafter-less system
(``decodes_without_drafter``), time their forwards (``measures_time``, ``step_ms``; ``hardware.clock: live``)
and record what a trace holds (``start_recording``, ``write_trace``; ``simulate --records``).

Built in, registered under their names: ``profile`` (statistical, fitted to the paper) and ``trace`` (replay of
recorded verifications, e.g. exported by ``dspark eval``). A scenario may name any other ``AcceptanceSource``
subclass by an entry point of the ``dspark_sim.acceptance`` group or by import string (``package.module:Class``),
which is how the torch runtime plugs in without the simulator importing it (see simulator/core/plugins.py and
docs/adding-an-acceptance-source.md). Built-ins and plug-ins are constructed alike (simulator/runs/run.py).
"""

from __future__ import annotations

from simulator.core.acceptance import profile, trace  # noqa: F401  (the built-ins register themselves)
from simulator.core.acceptance.base import REGISTRY, AcceptanceSource, Proposal, register
from simulator.core.plugins import ACCEPTANCE_GROUP, load_plugin


def resolve_source(spec: str, what: str = "acceptance.source") -> type[AcceptanceSource]:
    """The class of a scenario's ``acceptance.source``: a built-in name, an entry point or module:Class."""
    if spec in REGISTRY:
        return REGISTRY[spec]
    return load_plugin(spec, group=ACCEPTANCE_GROUP, base=AcceptanceSource, what=what, noun="acceptance source",
                       known=sorted(REGISTRY))


__all__ = ["REGISTRY", "AcceptanceSource", "Proposal", "register", "resolve_source"]

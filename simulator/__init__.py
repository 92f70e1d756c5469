"""dspark-sim's simulator: a SimPy model of continuous batching with speculative verification policies.

It never imports torch; real models reach it only through the acceptance-source interface.

The plug-in API is imported from here, wherever the classes live inside the package::

    from simulator import Policy, PolicyView, AcceptanceSource, Proposal, Router, Admission, Preemption

These names are stable across releases; the modules behind them are not (docs/extending.md)."""

from simulator.core.acceptance.base import AcceptanceSource, GrowingArrays, Proposal
from simulator.core.engine_rules import Admission, Preemption, Router
from simulator.core.policies.base import Policy, PolicyView

__version__ = "0.1.0"

__all__ = ["AcceptanceSource", "Admission", "GrowingArrays", "Policy", "PolicyView", "Preemption", "Proposal",
           "Router", "__version__"]

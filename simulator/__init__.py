"""dspark-sim's simulator: a SimPy model of continuous batching with speculative verification policies.

It never imports torch; real models reach it only through the acceptance-source interface.

The plug-in API is imported from here, wherever the classes live inside the package::

    from simulator import Policy, PolicyView, AcceptanceSource, Proposal, Router, Admission, Preemption

These names are stable across releases; the modules behind them are not (docs/extending.md)."""

import warnings

from simulator.core.acceptance.base import AcceptanceSource, GrowingArrays, Proposal
from simulator.core.engine_rules import Admission, Preemption, RoutedRequest, Router
from simulator.core.policies.base import Policy, PolicyView

__version__ = "0.1.0"

__all__ = ["AcceptanceSource", "Admission", "GrowingArrays", "Policy", "PolicyView", "Preemption", "Proposal",
           "RoutedRequest", "Router", "__version__"]


def warn_moved(old: str, names: str) -> None:
    """The plug-in paths of the last release (``simulator.policies``, ``simulator.acceptance``,
    ``simulator.engine_rules``) keep working for one release; importing one warns once, naming the stable import."""
    # FutureWarning, not DeprecationWarning: Python hides the latter outside __main__, and a plug-in author runs
    # their class through `simulate`, never as __main__.
    warnings.warn(f"{old} is deprecated and goes away in the next release: use `from simulator import {names}`",
                  FutureWarning, stacklevel=3)

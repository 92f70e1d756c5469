"""Deprecated path of the last release: ``from simulator import Policy, PolicyView`` instead."""

from simulator.core.policies import REGISTRY, Policy, PolicyView, checked_lengths, register  # noqa: F401
from simulator.moved import warn_moved

warn_moved("simulator.policies", "Policy, PolicyView")

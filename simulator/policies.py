"""Deprecated path of the last release: ``from simulator import Policy, PolicyView`` instead."""

from simulator import warn_moved
from simulator.core.policies import REGISTRY, Policy, PolicyView, checked_lengths, register  # noqa: F401

warn_moved("simulator.policies", "Policy, PolicyView")

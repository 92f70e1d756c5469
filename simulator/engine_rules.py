"""Deprecated path of the last release: ``from simulator import Router, Admission, Preemption`` instead."""

from simulator.core.engine_rules import Admission, Preemption, Router  # noqa: F401
from simulator.moved import warn_moved

warn_moved("simulator.engine_rules", "Router, Admission, Preemption")

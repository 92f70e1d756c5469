"""Deprecated path of the last release: ``from simulator import Router, Admission, Preemption`` instead."""

from simulator import warn_moved
from simulator.core.engine_rules import Admission, Preemption, Router  # noqa: F401

warn_moved("simulator.engine_rules", "Router, Admission, Preemption")

"""Deprecated path of the last release: ``from simulator import AcceptanceSource, Proposal`` instead."""

from simulator.core.acceptance import AcceptanceSource, Proposal  # noqa: F401
from simulator.moved import warn_moved

warn_moved("simulator.acceptance", "AcceptanceSource, Proposal, GrowingArrays")

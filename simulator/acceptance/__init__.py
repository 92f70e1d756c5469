"""Deprecated path of the last release: ``from simulator import AcceptanceSource, Proposal`` instead."""

from simulator import warn_moved
from simulator.core.acceptance import AcceptanceSource, Proposal  # noqa: F401

warn_moved("simulator.acceptance", "AcceptanceSource, Proposal, GrowingArrays")

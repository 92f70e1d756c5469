"""Deprecated path of the last release: ``from simulator import AcceptanceSource, Proposal, GrowingArrays``."""

from simulator.core.acceptance.base import AcceptanceSource, GrowingArrays, Proposal  # noqa: F401

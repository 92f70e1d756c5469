"""Verification policies: which draft tokens the target verifies each step.

Built-in policies register under a name; a researcher's policy is any ``Policy`` subclass, named in a scenario or
on the command line as ``module:Class`` (see docs/adding-a-policy.md).
"""

from __future__ import annotations

import re

from simulator.core.plugins import POLICY_GROUP, construct, load_plugin
from simulator.core.policies import adaptive, dspark, engines, oracle, static  # noqa: F401  (the built-ins register themselves)
from simulator.core.policies.base import REGISTRY, Policy, PolicyView, checked_lengths, register
from simulator.core.policies.greedy import greedy_prefix_lengths, top_k_prefix_lengths
from simulator.errors import PolicyError, UserError


def resolve(spec: str, what: str | None = None) -> tuple[type[Policy], dict]:
    """A policy class and the parameters its name implies: 'dspark', 'static-3' (k=3), 'threshold-0.7'
    (value=0.7), a name an installed package registers in the ``dspark_sim.policies`` entry-point group, or
    'package.module:Class' (see simulator/core/plugins.py). Unknown names raise a PolicyError that starts with
    ``what`` (default: the policy's name)."""
    if spec in REGISTRY:
        return REGISTRY[spec], {}
    m = re.fullmatch(r"([a-z][a-z0-9_-]*?)-([0-9]+(?:\.[0-9]+)?)", spec)
    if m and m.group(1) in REGISTRY and REGISTRY[m.group(1)].positional:
        cls = REGISTRY[m.group(1)]
        value = float(m.group(2))
        return cls, {cls.positional: int(value) if value.is_integer() and "." not in m.group(2) else value}
    try:
        return load_plugin(spec, group=POLICY_GROUP, base=Policy, what=what or f"policy {spec!r}",
                           noun="policy", known=describe_names()), {}
    except UserError as exc:
        raise PolicyError(str(exc)) from None


def make_policy(spec: str, params: dict | None = None, label: str | None = None) -> Policy:
    """The policy a system runs. Bad parameters (unknown names, values the constructor rejects with ValueError)
    raise a PolicyError naming the system (``label``) and what the class accepts."""
    cls, implied = resolve(spec)
    kwargs = {**implied, **(params or {})}
    who = f"system {label!r} (policy {spec!r})" if label and label != spec else f"policy {spec!r}"
    return construct(cls, kwargs, who, PolicyError)


def display_name(name: str, cls: type[Policy]) -> str:
    """How a registered policy is named in a scenario: 'dspark', or 'static-<k>' for a positional parameter."""
    return f"{name}-<{cls.positional}>" if cls.positional else name


def describe_names() -> list[str]:
    return [display_name(name, cls) for name, cls in sorted(REGISTRY.items())]


__all__ = [
    "REGISTRY",
    "Policy",
    "PolicyView",
    "checked_lengths",
    "display_name",
    "greedy_prefix_lengths",
    "make_policy",
    "register",
    "resolve",
    "top_k_prefix_lengths",
]

"""Systems: a drafter plus a verification policy, under a name (docs/model.md, "Systems, requests and replicas").

In a scenario a system is either a mapping (``{name, drafter, gamma, policy, params}``) or a shorthand string:
``ar`` (no drafter), ``mtp-k`` (the MTP module chained k times a step, all k verified: ``mtp-1`` is DeepSeek-V3's
setting), or a policy name run on the scenario's default drafter (``drafter: {name: dspark, gamma: 7}``), e.g.
``static-5``, ``threshold-0.7``, ``dspark``.

A system drafts exactly the gamma it asks for (its own, else the scenario drafter's when it drafts with that one,
else its drafter's default: MTP's 1), and ``static-k`` verifies k of them (fewer only where a request has fewer
tokens left); a system that would draft or verify fewer than it names is refused, in one line naming the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from simulator.core.drafters import DRAFTER_KINDS
from simulator.core.policies import resolve
from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario, System

MTP_K = re.compile(r"mtp-([1-9][0-9]*)")


def shorthand(entry: str, drafter: str) -> System:
    """The system a shorthand string names (module docstring)."""
    if entry == "ar":
        return System(name="ar", drafter="none", policy="ar")
    m = MTP_K.fullmatch(entry)
    if m:
        return System(name=entry, drafter="mtp", gamma=int(m.group(1)), policy=f"static-{m.group(1)}")
    return System(name=entry, drafter=drafter, policy=entry)


@dataclass(frozen=True)
class SystemSpec:
    name: str
    drafter: str
    gamma: int
    policy: str
    params: dict = field(default_factory=dict)

    def key(self) -> dict:
        return {"name": self.name, "drafter": self.drafter, "gamma": self.gamma, "policy": self.policy,
                "params": self.params}


def resolve_systems(scn: LoadedScenario) -> list[SystemSpec]:
    m = scn.model
    out: list[SystemSpec] = []
    for i, entry in enumerate(m.systems):
        where = f"{scn.path}: systems[{i}]"
        short = isinstance(entry, str)
        if short:
            entry = shorthand(entry, m.drafter.name)
        drafter = entry.drafter or m.drafter.name
        gamma, asked = system_gamma(entry, drafter, m.drafter.name, m.drafter.gamma)
        kind = DRAFTER_KINDS[drafter]
        if kind.fixed_gamma is not None and gamma != kind.fixed_gamma:
            raise UserError(f"{where}.gamma: drafter {drafter!r} drafts {kind.fixed_gamma} tokens a step; expected "
                            f"no gamma, got {gamma}")
        cls, implied = resolve(entry.policy, what=f"{where}.policy")
        if drafter == "none" and cls.name != "ar":
            raise UserError(f"{where}: drafter 'none' proposes nothing to verify; use policy 'ar' or a drafter")
        params = {**implied, **entry.params}
        k = params.get("k") if cls.name == "static" else None
        if isinstance(k, int) and k > gamma:
            source = {"system": f"systems[{i}].gamma", "scenario": "drafter.gamma",
                      "kind": f"its default; set systems[{i}].gamma"}[asked]
            raise UserError(f"{where if short else where + '.policy'}: {entry.policy} verifies {k} drafts a step, "
                            f"but drafter {drafter!r} drafts {gamma} ({source}); expected k <= {gamma}, or a gamma "
                            f"of at least {k}")
        name = entry.name or (f"mtp-{gamma}" if drafter == "mtp" and entry.policy == f"static-{gamma}" else entry.policy)
        out.append(SystemSpec(name=name, drafter=drafter, gamma=gamma, policy=entry.policy, params=params))
    names = [s.name for s in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise UserError(f"{scn.path}: systems: two systems are named {dup!r}; give one a 'name'")
    if m.sla.baseline is not None and m.sla.baseline not in names:
        raise UserError(f"{scn.path}: sla.baseline: {m.sla.baseline!r} is not one of the systems ({', '.join(names)}); "
                        "keep it in the list (--set systems+=NAME appends one) or name another with "
                        "--set sla.baseline=NAME")
    return out


def system_gamma(entry: System, drafter: str, default: str, default_gamma: int) -> tuple[int, str]:
    """(the gamma a system drafts, where it comes from: ``system``, ``kind`` or ``scenario``): its own gamma, else
    its drafter kind's fixed one (none's 0), else the scenario drafter's when it drafts with that drafter, else its
    drafter kind's default (MTP's 1), else the scenario drafter's."""
    kind = DRAFTER_KINDS[drafter]
    if entry.gamma is not None:
        return entry.gamma, "system"
    if kind.fixed_gamma is not None:
        return kind.fixed_gamma, "kind"
    if drafter != default and kind.default_gamma is not None:
        return kind.default_gamma, "kind"
    return default_gamma, "scenario"


def speculates(s: SystemSpec) -> bool:
    """Whether a system verifies draft tokens at all: not without a drafter, nor with policy ``ar`` or
    ``static-0`` (the no-speculation arm a plan's engine choice is measured against)."""
    cls, implied = resolve(s.policy)
    return not (s.drafter == "none" or cls.name == "ar" or (cls.name == "static" and {**implied, **s.params}.get("k") == 0))

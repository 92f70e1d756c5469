"""Systems: a drafter plus a verification policy, under a name (docs/model.md, "Systems, requests and replicas").

In a scenario a system is either a mapping (``{name, drafter, gamma, policy, params}``) or a shorthand string:
``ar`` (no drafter), ``mtp-1`` (the MTP module verified one token a step), or a policy name run on the scenario's
default drafter (``drafter: {name: dspark, gamma: 7}``), e.g. ``static-5``, ``threshold-0.7``, ``dspark``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.core.drafters import DRAFTER_KINDS
from simulator.core.policies import resolve
from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario, System

SHORTHANDS = {"ar": ("none", "ar"), "mtp-1": ("mtp", "static-1")}


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
        if isinstance(entry, str):
            drafter, policy = SHORTHANDS.get(entry, (m.drafter.name, entry))
            entry = System(name=entry, drafter=drafter, policy=policy)
        drafter = entry.drafter or m.drafter.name
        kind = DRAFTER_KINDS[drafter]
        if kind.fixed_gamma is not None:
            if entry.gamma is not None and entry.gamma != kind.fixed_gamma:
                raise UserError(f"{where}.gamma: drafter {drafter!r} proposes {kind.fixed_gamma} token(s), got {entry.gamma}")
            gamma = kind.fixed_gamma
        else:
            gamma = entry.gamma or m.drafter.gamma
        cls, implied = resolve(entry.policy, what=f"{where}.policy")
        if drafter == "none" and cls.name != "ar":
            raise UserError(f"{where}: drafter 'none' proposes nothing to verify; use policy 'ar' or a drafter")
        name = entry.name or (entry.policy if not (drafter == "mtp" and entry.policy == "static-1") else "mtp-1")
        out.append(SystemSpec(name=name, drafter=drafter, gamma=gamma, policy=entry.policy,
                              params={**implied, **entry.params}))
    names = [s.name for s in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise UserError(f"{scn.path}: systems: two systems are named {dup!r}; give one a 'name'")
    if m.sla.baseline is not None and m.sla.baseline not in names:
        raise UserError(f"{scn.path}: sla.baseline: {m.sla.baseline!r} is not one of the systems ({', '.join(names)}); "
                        "keep it in the list (--set systems+=NAME appends one) or name another with "
                        "--set sla.baseline=NAME")
    return out

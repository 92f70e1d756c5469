"""The acceptance-source interface: the core calls every source answers, the runtime extension whose hooks the
engine calls only on a RuntimeSource, and built-ins registered and constructed as plug-ins are."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from simulator.core.acceptance import REGISTRY, AcceptanceSource, Proposal, resolve_source
from simulator.core.acceptance.profile import ProfileSource
from simulator.core.acceptance.runtime import RuntimeSource
from simulator.core.acceptance.trace import TraceSource
from simulator.errors import UserError
from tests.simulator.engine_helpers import simulate


class CoreWithHookNames(AcceptanceSource):
    """A core source that defines methods named as the runtime hooks: being no RuntimeSource, it is never told of
    prefills or preemptions. Half its draft tokens survive, drawn in advance."""

    draws_outcome = True

    def __init__(self, *, scenario, drafter, gamma, mix, calibrated, rng):
        self.gamma = gamma
        self.rng = rng
        self.calls: Counter[str] = Counter()

    def propose(self, ids):
        survives = self.rng.random((len(ids), self.gamma)) < 0.5
        return Proposal(confidence=np.full((len(ids), self.gamma), 0.5),
                        outcome=np.logical_and.accumulate(survives, axis=1).sum(axis=1))

    def verify(self, proposal, lengths):
        return np.minimum(lengths, proposal.outcome)

    def prefilled(self, ids):
        self.calls["prefilled"] += len(ids)

    def prefilled_elsewhere(self, ids):
        self.calls["prefilled_elsewhere"] += len(ids)

    def preempt(self, ids):
        self.calls["preempt"] += len(ids)


class RuntimeWithHooks(CoreWithHookNames, RuntimeSource):
    """The same source as a RuntimeSource: it is also given the engine facts, and told of every prefill and
    preemption (its hooks end nothing, so its runs are the core source's)."""

    def __init__(self, *, slots, disaggregated, **core):
        super().__init__(**core)
        self.slots, self.disaggregated = slots, disaggregated


def run_both(scenario_file, **fields):
    rows, sims = {}, {}
    for cls in (CoreWithHookNames, RuntimeWithHooks):
        path = scenario_file(name=cls.__name__, systems=["static-3"],
                             acceptance={"source": f"{__name__}:{cls.__name__}"}, **fields)
        rows[cls], sims[cls] = simulate(path, quick=True)
    return rows, sims


def test_runtime_hooks_reach_only_a_runtime_source(scenario_file):
    rows, sims = run_both(scenario_file, engine={"kv_capacity_tokens": 3000}, frontier={"concurrency": [24]},
                          workload={"prompt": 200, "output": {"dist": "uniform", "low": 50, "high": 600}})
    core, runtime = sims[CoreWithHookNames], sims[RuntimeWithHooks]
    assert core.source.calls == Counter()
    assert runtime.preemptions > 0 and runtime.source.calls["preempt"] == runtime.preemptions
    # every request that emitted a token was prefilled here once, and again after each preemption readmitted
    first = int((~np.isnan(runtime.requests.frame()["first_token"])).sum())
    assert first <= runtime.source.calls["prefilled"] <= first + runtime.preemptions
    assert runtime.source.calls["prefilled_elsewhere"] == 0
    assert (runtime.source.slots, runtime.source.disaggregated) == (64, False)  # max_running x 1 replica
    for key in ("tau", "throughput_per_gpu", "steps", "preemptions"):
        assert rows[CoreWithHookNames][key] == rows[RuntimeWithHooks][key], key


def test_a_disaggregated_pool_tells_a_runtime_source_of_each_first_token(scenario_file):
    rows, sims = run_both(scenario_file, engine={"prefill": "disaggregated", "max_running": 16},
                          hardware={"replicas": 3}, frontier={"concurrency": [24]})
    runtime = sims[RuntimeWithHooks]
    assert sims[CoreWithHookNames].source.calls == Counter()
    assert runtime.remote_tokens > 0 and runtime.source.calls["prefilled_elsewhere"] == runtime.remote_tokens
    assert (runtime.source.slots, runtime.source.disaggregated) == (48, True)  # 16 running x 3 replicas
    assert rows[CoreWithHookNames]["tau"] == rows[RuntimeWithHooks]["tau"]


def test_a_core_source_cannot_drive_the_live_clock(scenario_file):
    path = scenario_file(systems=["static-3"], hardware={"clock": "live"},
                         acceptance={"source": f"{__name__}:CoreWithHookNames"})
    with pytest.raises(UserError, match=r"hardware\.clock: 'live' needs a source that runs real forwards"):
        simulate(path, quick=True)


def test_an_engine_fact_is_not_an_option(scenario_file):
    path = scenario_file(systems=["static-3"],
                         acceptance={"source": f"{__name__}:RuntimeWithHooks", "options": {"slots": 4}})
    with pytest.raises(UserError, match=r"acceptance\.options\.slots: set by the simulator for every source"):
        simulate(path, quick=True)


def test_the_builtins_are_registered_under_their_names():
    assert REGISTRY == {"profile": ProfileSource, "trace": TraceSource}
    assert all(resolve_source(name) is cls for name, cls in REGISTRY.items())


@pytest.mark.parametrize(("spec", "match"), [
    ("profle", r"unknown acceptance source 'profle' \(did you mean 'profile'\?\); known: profile, trace"),
    ("nosuchmodule:Source", r"cannot import module 'nosuchmodule'"),
    ("simulator.core.acceptance.profile:Profile", r"'Profile', expected a subclass of .*AcceptanceSource"),
])
def test_unresolvable_sources_are_one_line_errors(spec, match):
    with pytest.raises(UserError, match=match) as info:
        resolve_source(spec, what="scn.yaml: acceptance.source")
    assert str(info.value).startswith("scn.yaml: acceptance.source: ") and "\n" not in str(info.value)


class ProfileByImport(ProfileSource):
    """The built-in profile source named by import string, as a plug-in is."""


def test_a_builtin_is_built_with_the_plugin_keyword_contract(scenario_file):
    """The registered ``profile`` and the same class reached as a plug-in are constructed alike: the same runs."""
    rows = [simulate(scenario_file(name=f"s{i}", systems=["dspark"], acceptance={"source": source}))[0]
            for i, source in enumerate(["profile", f"{__name__}:ProfileByImport"])]
    for key in ("tau", "throughput_per_gpu", "tps_per_user", "steps"):
        assert rows[0][key] == rows[1][key], key
    assert 1.5 < rows[0]["tau"] < 8

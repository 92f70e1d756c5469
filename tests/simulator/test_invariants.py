"""The invariant checker can fail: each numbered invariant fires on a real simulation whose logs were broken in
exactly the way it forbids (and the same simulation unbroken passes)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from simulator import invariants
from simulator.config import load_scenario
from simulator.engine import STEP_COLUMNS
from simulator.invariants import InvariantViolation, check_invariants
from simulator.run import LoadPoint, RunSpec, run_one
from simulator.systems import resolve_systems
from tests.conftest import ROOT


def step_col(sim, name: str) -> np.ndarray:
    return sim.steps.data[: sim.steps.n, list(STEP_COLUMNS).index(name)]


def first_finished(sim) -> int:
    return int(np.flatnonzero(~np.isnan(sim.requests.data["finish"][: sim.requests.n]))[0])


def busy_step(sim) -> int:
    return int(np.flatnonzero(step_col(sim, "verified") > 0)[0])


def _inv1(sim):
    step_col(sim, "end")[0] = step_col(sim, "start")[0] - 1.0


def _inv2(sim):
    sim.replicas[0].idle_checks.append((0.0, 3))


def _inv3(sim):
    step_col(sim, "emitted")[busy_step(sim)] += 1


def _inv4(sim):
    i = busy_step(sim)
    step_col(sim, "accepted")[i] = step_col(sim, "verified")[i] + 1


def _inv5(sim):
    step_col(sim, "batch_tokens")[0] = sim.config.max_batch_tokens + 1


def _inv6(sim):
    step_col(sim, "kv_used")[0] = sim.config.kv_capacity + 1


def _inv7(sim):
    sim.remote_tokens += 1


def _inv8(sim):
    sim.requests.data["output"][first_finished(sim)] -= 1


def _inv9(sim):
    r = first_finished(sim)
    sim.requests.data["finish"][r] = sim.requests.data["arrival"][r] - 1.0


BREAKS = {"INV-1 clock": _inv1, "INV-2 work-conserving": _inv2, "INV-3 step-tokens": _inv3,
          "INV-4 verify-bounds": _inv4, "INV-5 batch-cap": _inv5, "INV-6 kv-capacity": _inv6,
          "INV-7 held-tokens": _inv7, "INV-8 lengths": _inv8, "INV-9 request-times": _inv9}


@pytest.mark.parametrize("name", list(BREAKS))
def test_each_invariant_catches_its_violation(scenario_file, name):
    scn = load_scenario(scenario_file(systems=["static-3"], workload={"prompt": 64, "output": 32}))
    _, sim = run_one(scn, RunSpec(resolve_systems(scn)[0], LoadPoint(8), 0, True))
    check_invariants(sim)  # as simulated: no violation
    BREAKS[name](sim)
    with pytest.raises(InvariantViolation, match=name):
        check_invariants(sim)


def test_docs_model_lists_every_invariant_and_names_real_tests():
    doc = (ROOT / "docs" / "model.md").read_text()
    for inv in re.findall(r"INV-\d+ [a-z-]+", invariants.__doc__):
        num, name = inv.split()
        assert f"| {num} | {name} |" in doc, inv
    rows = [line for line in doc.splitlines() if line.startswith("| INV-")]
    assert [int(re.match(r"\| INV-(\d+)", r).group(1)) for r in rows] == list(range(1, len(rows) + 1))
    cited = 0
    for row in rows:
        for path in set(re.findall(r"`(tests/[\w/]+\.py)::", row)):
            source = (ROOT / path).read_text()
            for test in re.findall(r"::(\w+)`", row):
                assert f"def {test}(" in source, (path, test)
                cited += 1
    assert cited >= 8


def test_the_routers_load_count_is_held_to_the_replicas(scenario_file):
    scn = load_scenario(scenario_file(systems=["static-3"], workload={"prompt": 64, "output": 32},
                                      hardware={"replicas": 3}, frontier={"concurrency": [10]}))
    _, sim = run_one(scn, RunSpec(resolve_systems(scn)[0], LoadPoint(10), 0, True))
    check_invariants(sim)
    assert sim.router.loads.tolist() == [rep.load for rep in sim.replicas] and sim.router.loads.sum() == 10
    sim.router.loads[0] += 1
    with pytest.raises(InvariantViolation, match="INV-2 work-conserving: replica 0: the router counts"):
        check_invariants(sim)

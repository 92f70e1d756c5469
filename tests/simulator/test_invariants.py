"""The invariant checker can fail: each numbered invariant fires on a real simulation whose logs were broken in
exactly the way it forbids (and the same simulation unbroken passes); `simulate --check-invariants` stops a run
whose plug-in breaks one; docs/model.md states each invariant as the checker's docstring does."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from simulator.core import invariants
from simulator.core.engine import STEP_COLUMNS
from simulator.core.invariants import InvariantViolation, check_invariants
from simulator.inputs.config import load_scenario
from simulator.inputs.systems import resolve_systems
from simulator.runs.run import LoadPoint, RunSpec, run_one
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


def _inv10(sim):
    step_col(sim, "queued")[busy_step(sim)] += 1  # the replica logs a request it was never sent


BREAKS = {"INV-1 clock": _inv1, "INV-2 work-conserving": _inv2, "INV-3 step-tokens": _inv3,
          "INV-4 verify-bounds": _inv4, "INV-5 batch-cap": _inv5, "INV-6 kv-capacity": _inv6,
          "INV-7 held-tokens": _inv7, "INV-8 lengths": _inv8, "INV-9 request-times": _inv9,
          "INV-10 request-conservation": _inv10}


@pytest.mark.parametrize("name", list(BREAKS))
def test_each_invariant_catches_its_violation(scenario_file, name):
    scn = load_scenario(scenario_file(systems=["static-3"], workload={"prompt": 64, "output": 32}))
    _, sim = run_one(scn, RunSpec(resolve_systems(scn)[0], LoadPoint(8), 0, True))
    check_invariants(sim)  # as simulated: no violation
    BREAKS[name](sim)
    with pytest.raises(InvariantViolation, match=name):
        check_invariants(sim)


def test_kv_capacity_holds_the_caches_running_totals_to_a_recount(scenario_file):
    """INV-6 also recounts each replica's KV use from its batch when the run stops: a running total that drifted
    from what the batch holds breaks it, though every step's logged use is within the capacity."""
    scn = load_scenario(scenario_file(systems=["static-3"], workload={"prompt": 64, "output": 32}))
    _, sim = run_one(scn, RunSpec(resolve_systems(scn)[0], LoadPoint(8), 0, True))
    check_invariants(sim)
    sim.replicas[0].kv.tokens += 1
    with pytest.raises(InvariantViolation, match="INV-6 kv-capacity: replica 0: the KV cache counts"):
        check_invariants(sim)


def test_request_conservation_holds_the_engines_queues_and_batches_to_the_request_log(scenario_file):
    """At the end of a run the checker reads who holds each request: a request lost from a batch, one queued twice,
    one held by a replica it was not routed to each break INV-10 (the step counts alone would miss the last two)."""
    scn = load_scenario(scenario_file(systems=["static-3"], workload={"prompt": 64, "output": 32},
                                      hardware={"replicas": 2}, frontier={"concurrency": [8]}))
    spec = RunSpec(resolve_systems(scn)[0], LoadPoint(8), 0, True)

    def lose(sim):
        sim.replicas[0].batch.drop_last()

    def twice(sim):
        sim.replicas[0].queue.append(int(sim.replicas[0].batch.col("rid")[0]))

    def elsewhere(sim):
        rid = int(sim.replicas[0].batch.col("rid")[0])
        sim.requests.data["replica"][rid] = 1

    for brk, what in ((lose, "neither finished, rejected nor held"), (twice, "held more than once"),
                      (elsewhere, "held by a replica they were not routed to")):
        _, sim = run_one(scn, spec)
        check_invariants(sim)
        brk(sim)
        with pytest.raises(InvariantViolation, match=f"INV-10 request-conservation: 1 requests .*{what}"):
            check_invariants(sim)


def test_a_prefill_pool_emits_the_first_token_before_routing(scenario_file):
    """INV-9's disaggregated half: the pool's first token, then the decode replica's queue."""
    scn = load_scenario(scenario_file(systems=["static-3"], workload={"prompt": 64, "output": 32},
                                      engine={"prefill": "disaggregated"}))
    _, sim = run_one(scn, RunSpec(resolve_systems(scn)[0], LoadPoint(8), 0, True))
    check_invariants(sim)
    r = first_finished(sim)
    req = sim.requests.data
    assert req["first_token"][r] == req["routed"][r]  # routed the moment the pool finished the prompt
    req["first_token"][r] = req["routed"][r] + 1e-6  # a microsecond later: as if the decode replica made it
    assert req["first_token"][r] < req["finish"][r]  # every other order still holds
    with pytest.raises(InvariantViolation, match="INV-9 request-times: routed before first_token"):
        check_invariants(sim)


# A plug-in policy with a bug no per-call check can see: the source's accepted counts are checked (0..l) before
# the policy's observe() sees them, and this observe adds the bonus token to the engine's own array in place, so
# every request-step emits one token too many.
BONUS_POLICY = """\
import numpy as np
from simulator.core.policies import Policy


class CountsBonus(Policy):
    \"\"\"Verifies whole blocks; counts the tokens each step emits, bonus token included.\"\"\"

    reads_confidence = False

    def __init__(self):
        self.emitted = 0

    def choose(self, view):
        return view.max_lengths

    def observe(self, lengths, accepted):
        accepted += 1  # the bug: the engine's array, not a copy
        self.emitted += int(accepted.sum())
"""


@pytest.mark.slow
def test_check_invariants_flag_stops_a_run_whose_plugin_breaks_one(scenario_file, tmp_path):
    plug = tmp_path / "plug"
    plug.mkdir()
    (plug / "bonus_policy.py").write_text(BONUS_POLICY)
    path = scenario_file(systems=["mtp-1", {"name": "bonus", "policy": "bonus_policy:CountsBonus"}],
                         frontier={"concurrency": [8]})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plug), str(ROOT)])}

    def simulate_cli(*flags: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "simulator.cli", str(path), "--quick", "--out", str(tmp_path / "o"),
               "--jobs", "2", *flags]
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    quiet = simulate_cli()
    assert quiet.returncode == 0, quiet.stderr  # without the flag the run goes through, its numbers wrong
    assert set(pd.read_csv(tmp_path / "o" / "runs.csv")["policy"]) == {"mtp-1", "bonus"}
    checked = simulate_cli("--check-invariants")  # the stored runs are run again to be checked
    assert checked.returncode == 2 and "Traceback" not in checked.stderr
    error = checked.stderr.strip().splitlines()[-1]
    assert error.startswith("error: --check-invariants: system 'bonus' at closed-8, seed 0: INV-4 verify-bounds: ")
    assert "INV-8 lengths: a request emitted past its output length" in error
    assert "mtp-1" not in error


def test_docs_model_states_every_invariant_as_the_checker_does():
    """The table of docs/model.md and the checker's docstring state each checked invariant in the same words
    (markup aside), and every test a row names exists."""
    doc = (ROOT / "docs" / "model.md").read_text()

    def words(text: str) -> str:
        return " ".join(text.replace("``", "`").split()).rstrip(";.")

    code = {f"INV-{num} {name}": words(text) for num, name, text in
            re.findall(r"^- INV-(\d+) ([a-z-]+): (.*?)(?=^- INV-|^$)", invariants.__doc__, re.S | re.M)}
    assert list(code) == [f"INV-{i} {name}" for i, name in enumerate(
        ["clock", "work-conserving", "step-tokens", "verify-bounds", "batch-cap", "kv-capacity", "held-tokens",
         "lengths", "request-times", "request-conservation"], start=1)]
    assert list(code) == list(BREAKS)  # each one broken by the test above
    table = {f"{num} {name}": words(text) for num, name, text in
             re.findall(r"^\| (INV-\d+) \| ([a-z-]+) \| (.*?) \|", doc, re.M)}
    for inv, statement in code.items():
        assert table.get(inv) == statement, inv
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


def test_a_step_that_drafts_less_than_gamma_breaks_inv4(scenario_file):
    """INV-4 also holds the drafter to the whole gamma: a step whose source proposed one token fewer than gamma x
    decoding requests fires, though it verified no more than it drafted."""
    scn = load_scenario(scenario_file(drafter={"name": "dspark", "gamma": 3}, systems=["static-1"],
                                      workload={"prompt": 64, "output": 32}))
    _, sim = run_one(scn, RunSpec(resolve_systems(scn)[0], LoadPoint(8), 0, True))
    check_invariants(sim)
    i = busy_step(sim)
    assert step_col(sim, "drafted")[i] == 3 * step_col(sim, "decoding")[i] > step_col(sim, "verified")[i]
    step_col(sim, "drafted")[i] -= 1
    with pytest.raises(InvariantViolation, match=r"INV-4 verify-bounds: a step drafted other than gamma \(3\) x "
                                                 "decoding requests"):
        check_invariants(sim)


def test_the_routers_load_count_is_held_to_the_replicas(scenario_file):
    scn = load_scenario(scenario_file(systems=["static-3"], workload={"prompt": 64, "output": 32},
                                      hardware={"replicas": 3}, frontier={"concurrency": [10]}))
    _, sim = run_one(scn, RunSpec(resolve_systems(scn)[0], LoadPoint(10), 0, True))
    check_invariants(sim)
    assert sim.router.loads.tolist() == [rep.load for rep in sim.replicas] and sim.router.loads.sum() == 10
    sim.router.loads[0] += 1
    with pytest.raises(InvariantViolation, match="INV-2 work-conserving: replica 0: the router counts"):
        check_invariants(sim)


@pytest.mark.slow
def test_check_invariants_flag_stops_a_plan_whose_plugin_breaks_one(scenario_file, tmp_path):
    plug = tmp_path / "plug"
    plug.mkdir()
    (plug / "bonus_policy.py").write_text(BONUS_POLICY)
    path = scenario_file(systems=[{"name": "bonus", "policy": "bonus_policy:CountsBonus"}],
                         traffic={"kind": "poisson", "rate": 4.0})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plug), str(ROOT)])}

    def plan_cli(*flags: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "simulator.cli", "plan", str(path), "--quick", "--replicates", "1",
               "--max-gpus", "2", "--out", str(tmp_path / "p"), "--jobs", "1", *flags]
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    assert plan_cli().returncode == 0  # the plan goes through on the wrong numbers
    checked = plan_cli("--check-invariants")  # the runs it stored are run again to be checked
    assert checked.returncode == 2 and "Traceback" not in checked.stderr
    error = checked.stderr.strip().splitlines()[-1]
    assert error.startswith("error: --check-invariants: system 'bonus' at open, seed 0: INV-4 verify-bounds: ")

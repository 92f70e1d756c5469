"""The engine built in code, without a scenario: step-level numbers worked out by hand, and the replaceable rules
(router, admission, preemption) as a researcher would plug theirs in."""

from __future__ import annotations

import numpy as np
import pytest

from hw_profile.tables.step_table import StepTimeGrid
from simulator.core.acceptance.base import AcceptanceSource, Proposal
from simulator.core.columns import Batch
from simulator.core.drafters import DRAFTER_KINDS, DraftCost
from simulator.core.engine import Simulation, StepPrices
from simulator.core.engine_config import EngineConfig
from simulator.core.engine_rules import Admission, FirstComeFirstServed, Preemption, PrefixAffinity, Router
from simulator.core.invariants import check_invariants
from simulator.errors import UserError
from tests.simulator.engine_helpers import simulate


def flat(ms: float) -> StepTimeGrid:
    """A table whose every step takes ``ms``, whatever B and K."""
    return StepTimeGrid.from_points(np.array([1, 1, 4096, 4096]), np.array([0, 1e6, 0, 1e6]), np.full(4, ms))


class GivenDrafts(AcceptanceSource):
    """Every step, request r's block has confidences ``conf[r]`` and ``accept[r]`` of its draft tokens are right
    (rows by request id, so the numbers follow the request wherever it sits in the batch)."""

    def __init__(self, conf: list[list[float]], accept: list[int]):
        self.gamma = len(conf[0])
        self.conf = np.array(conf)
        self.accept = np.array(accept)

    def attach(self, ids, mix_index):
        pass

    def propose(self, ids):
        self._ids = ids
        return Proposal(confidence=self.conf[ids])

    def verify(self, proposal, lengths):
        return np.minimum(lengths, self.accept[self._ids])

    def detach(self, ids):
        pass


def assert_counts_kept(sim: Simulation) -> None:
    """The counts a replica keeps as requests come and go equal those recomputed from its batch."""
    for rep in sim.replicas:
        b = rep.batch
        assert rep.tokens == int((b.col("prompt") + b.col("generated")).sum())
        assert rep.prefilling == int(np.count_nonzero(b.col("to_prefill")))
        if not rep.kv.active:  # no prefix cached: KV use is the contexts plus the lookahead slots, as it always was
            assert rep.kv_used() == rep.tokens + b.n * sim.config.lookahead


def two_requests(sim: Simulation, prompt=(4, 4), output=(20, 20)) -> None:
    sim.open_loop(np.zeros(len(prompt)), np.array(prompt), np.array(output), np.zeros(len(prompt), dtype=np.int64))


def test_one_speculative_step_by_hand():
    # R = 2 requests, gamma = 3. Confidences give prefix survivals a = (0.9, 0.72, 0) and (0.5, 0.25, 0.125); on a
    # flat table SPS does not fall with B, so DSpark's greedy verifies every candidate with a > 0: lengths (2, 3).
    # The target accepts 1 and 3 of them.
    config = EngineConfig(max_running=2, max_batch_tokens=64, kv_capacity=10_000, gamma=3, stall_ms=0.3)
    draft = DraftCost(DRAFTER_KINDS["dspark"], flat(1.0))  # one parallel pass over the block: 1 ms
    source = GivenDrafts([[0.9, 0.8, 0.0], [0.5, 0.5, 0.5]], accept=[1, 3])
    sim = Simulation(config, StepPrices(flat(10.0), draft=draft), source=source, policy="dspark")
    two_requests(sim)
    sim.run(until=0.0213 + 1e-9)
    st = sim.steps.frame()
    # step 1: both prompts (8 tokens) prefill, nothing decodes: no draft, no stall, T = 10 ms; two first tokens
    # step 2: both decode: draft 1 ms + DSpark's stall 0.3 ms + T 10 ms = 11.3 ms; B = 2 anchors + 5 verified;
    #         emitted = 1 + 3 accepted + one target token each = 6
    assert st["step_ms"].tolist() == pytest.approx([10.0, 11.3])
    assert st["end"].tolist() == pytest.approx([0.010, 0.0213])
    assert st["prefill_tokens"].tolist() == [8, 0]
    assert st["batch_tokens"].tolist() == [8, 7]
    assert st["verified"].tolist() == [0, 5]
    assert st["accepted"].tolist() == [0, 4]
    assert st["emitted"].tolist() == [2, 6]
    assert st["kv_tokens"].tolist() == [0, 10]  # step 2 reads both prompts plus both first tokens
    assert sim.replicas[0].batch.col("generated").tolist() == [3, 5]
    check_invariants(sim)


def test_plain_decoding_needs_no_source_and_no_policy():
    sim = Simulation(EngineConfig(max_running=8, max_batch_tokens=64, kv_capacity=10_000), StepPrices(flat(5.0)))
    two_requests(sim, output=(3, 5))
    sim.run(until=1.0)
    rq = sim.requests.frame()
    # one prefill step, then one token a step: the 3-token request finishes after step 3, the other after step 5
    assert rq["finish"].tolist() == pytest.approx([0.015, 0.025])
    check_invariants(sim)


def test_a_drafter_needs_a_source():
    with pytest.raises(ValueError, match="acceptance source"):
        Simulation(EngineConfig(max_running=2, max_batch_tokens=64, kv_capacity=100, gamma=3), StepPrices(flat(1.0)))


@pytest.mark.parametrize("router, expect", [("round-robin", [0, 1, 2, 0, 1, 2]), ("least-loaded", [0, 1, 2, 0, 1, 2])])
def test_routers_spread_equal_requests(router, expect):
    sim = Simulation(EngineConfig(max_running=8, max_batch_tokens=512, kv_capacity=10_000, replicas=3, router=router),
                     StepPrices(flat(5.0)))
    two_requests(sim, prompt=(4,) * 6, output=(50,) * 6)
    sim.run(until=0.001)
    assert sim.requests.frame()["replica"].tolist() == expect


@pytest.mark.parametrize("router, fifth", [("least-loaded", 1), ("round-robin", 0)])
def test_least_loaded_routes_around_a_busy_replica(router, fifth):
    sim = Simulation(EngineConfig(max_running=8, max_batch_tokens=512, kv_capacity=10_000, replicas=2,
                                  router=router), StepPrices(flat(5.0)))
    # four requests alternate over the two replicas; request 1 (replica 1) ends after two steps, so at 50 ms
    # replica 0 holds two and replica 1 one: the fifth goes to 1 by load, to 0 by turn
    two_requests(sim, prompt=(4, 4, 4, 4), output=(50, 2, 50, 50))
    sim.run(until=0.05)
    sim.submit(np.array([4]), np.array([50]), np.zeros(1, dtype=np.int64))
    sim.run(until=0.06)
    assert sim.requests.frame()["replica"].tolist() == [0, 1, 0, 1, fifth]
    check_invariants(sim)


def test_a_plug_in_admission_rule_orders_the_batch(examples_on_path):
    from shortest_prompt_first import ShortestPromptFirst  # docs/extending.md's example

    cfg = dict(max_running=2, max_batch_tokens=4096, kv_capacity=100_000)
    prompts = (900, 300, 100, 50)
    runs = {}
    for label, rule in (("fcfs", FirstComeFirstServed), ("shortest-first", ShortestPromptFirst)):
        sim = Simulation(EngineConfig(**cfg, admission=rule, prefill_chunk=128), StepPrices(flat(5.0)))
        two_requests(sim, prompt=prompts, output=(10,) * 4)
        for t in np.arange(0.005, 0.2, 0.005):  # chunked prefills of 128 tokens come and go
            sim.run(until=t)
            assert_counts_kept(sim)
        sim.run(until=1.0)
        check_invariants(sim)
        runs[label] = sim.requests.frame()["admitted"]
    # first come: requests 0 and 1 at once, 2 and 3 when they finish; shortest first: 3 and 2, then 1 and 0
    assert runs["fcfs"][0] == runs["fcfs"][1] == 0.0 < runs["fcfs"][2]
    assert runs["shortest-first"][3] == runs["shortest-first"][2] == 0.0 < runs["shortest-first"][1]


class Greedy(Admission):
    """Takes everything, whatever fits: the engine must refuse it."""

    name = "greedy"

    def take(self, queue, room, free_kv, requests, lookahead):
        taken = list(queue)
        queue.clear()
        return taken


class OutOfRange(Preemption):
    name = "out-of-range"

    def victim(self, batch: Batch) -> int:
        return batch.n


@pytest.mark.parametrize("config, prompt, output, until, message", [
    # takes 3 requests into a batch of 2
    ({"max_running": 2, "kv_capacity": 100_000, "admission": Greedy}, 4, 5, 1.0,
     "admission rule Greedy: take() took 3 requests into a batch with room for 2; expected at most 2"),
    # room for them all, not KV
    ({"max_running": 4, "kv_capacity": 10, "admission": Greedy}, 4, 5, 1.0,
     "admission rule Greedy: take() took 3 requests needing 15 KV slots; expected at most the 10 free slots"),
    # the KV cache fills, and the rule names a row past the batch
    ({"max_running": 4, "kv_capacity": 560, "preemption": OutOfRange}, 100, 100, 10.0,
     "preemption rule OutOfRange: victim() returned 3; expected a row index 0..2 of the running batch (3 rows)"),
])
def test_a_rule_that_breaks_its_contract_is_stopped(config, prompt, output, until, message):
    sim = Simulation(EngineConfig(max_batch_tokens=4096, **config), StepPrices(flat(5.0)))
    two_requests(sim, prompt=(prompt,) * 3, output=(output,) * 3)
    with pytest.raises(UserError) as err:
        sim.run(until=until)
    assert str(err.value) == message


class Oldest(Preemption):
    name = "oldest"

    def victim(self, batch: Batch) -> int:
        return 0


@pytest.mark.parametrize("rule, evicted", [("newest", 2), (Oldest, 0)])
def test_the_preemption_rule_picks_who_is_recomputed(rule, evicted):
    # three requests of 100-token prompts growing to 200 tokens in a 560-slot cache: the third to join overflows
    sim = Simulation(EngineConfig(max_running=4, max_batch_tokens=4096, kv_capacity=560, preemption=rule),
                     StepPrices(flat(5.0)))
    two_requests(sim, prompt=(100, 100, 100), output=(100, 100, 100))
    for t in np.arange(0.05, 1.0, 0.05):  # through the preemption and the recompute
        sim.run(until=t)
        assert_counts_kept(sim)
    sim.run(until=10.0)
    check_invariants(sim)
    rq = sim.requests.frame()
    assert rq["preemptions"][evicted] >= 1
    assert rq["preemptions"].sum() == rq["preemptions"][evicted]  # only that one, once or more
    assert np.all(~np.isnan(rq["finish"]))


def test_unknown_rules_are_one_line_errors():
    with pytest.raises(UserError, match=r"EngineConfig\.router: unknown router 'nearest'"):
        EngineConfig(max_running=1, max_batch_tokens=8, kv_capacity=8, router="nearest")
    with pytest.raises(UserError, match="not a subclass of Admission"):
        EngineConfig(max_running=1, max_batch_tokens=8, kv_capacity=8, admission=Oldest)


def test_a_scenario_names_its_rules(scenario_file, examples_on_path):
    path = scenario_file(name="rules", hardware={"router": "round-robin", "replicas": 2},
                         engine={"admission": "shortest_prompt_first:ShortestPromptFirst", "preemption": "newest"})
    _, sim = simulate(path, quick=True)
    assert type(sim.router).__name__ == "RoundRobin"
    assert type(sim.replicas[0].admission).__name__ == "ShortestPromptFirst"
    with pytest.raises(UserError, match=r"rules2\.yaml: hardware\.router: unknown router 'nearest'; known: least-loaded, prefix-affinity, round-robin"):
        simulate(scenario_file(name="rules2", hardware={"router": "nearest"}), quick=True)


class SeventhReplica(Router):
    """A broken plug-in: names a replica the deployment does not have."""

    def choose(self) -> int:
        return 7


def test_a_router_that_names_no_replica_is_one_line_naming_it(scenario_file):
    sim = Simulation(EngineConfig(max_running=8, max_batch_tokens=512, kv_capacity=10_000, replicas=2,
                                  router=SeventhReplica), StepPrices(flat(5.0)))
    two_requests(sim, prompt=(4,), output=(5,))
    with pytest.raises(UserError) as err:
        sim.run(until=0.1)
    assert str(err.value) == "router SeventhReplica: choose() returned 7; expected a replica index 0..1 (2 replicas)"
    # in a scenario run, the message also names the system and the load point it broke
    path = scenario_file(hardware={"replicas": 2, "router": f"{__name__}:SeventhReplica"}, systems=["ar"])
    with pytest.raises(UserError) as err:
        simulate(path)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{path}: system 'ar' at closed-")
    assert text.endswith("router SeventhReplica: choose() returned 7; expected a replica index 0..1 (2 replicas)")


class Forgetful(Admission):
    """Takes the oldest request but returns nothing (no ``return``)."""

    name = "forgetful"

    def take(self, queue, room, free_kv, requests, lookahead):
        queue.popleft()


@pytest.mark.parametrize("rids, removed, room, message", [
    (None, 1, 4, "returned None; expected a list of the request ids it took from the queue"),
    ("0", 1, 4, "returned '0'; expected a list of the request ids it took from the queue"),
    (np.array(2), 1, 4, "returned array(2); expected a list of the request ids it took from the queue"),
    ([0, 9], 2, 4, "returned 9 among its ids; expected request ids from the queue (integers 0..4)"),
    ([True], 1, 4, "returned True among its ids; expected request ids from the queue (integers 0..4)"),
    ([1.0], 1, 4, "returned 1.0 among its ids; expected request ids from the queue (integers 0..4)"),
    ([2, 2], 2, 4, "returned a request id twice ([2, 2]); expected each id once"),
    ([1], 2, 4, "returned 1 request id(s) but removed 2 from the queue; expected it to return exactly the ids it "
                "removed"),
    ([0, 1, 2], 3, 2, "took 3 requests into a batch with room for 2; expected at most 2"),
])
def test_an_admission_answer_is_held_to_its_contract(rids, removed, room, message):
    rule = Forgetful()
    with pytest.raises(UserError) as err:
        rule.checked(rids, removed, room, logged=5)
    assert str(err.value) == f"admission rule Forgetful: take() {message}"
    ok = rule.checked(np.array([3, 1]), 2, 2, logged=5)  # an array of ids is a list of ids
    assert ok == [3, 1] and all(type(r) is int for r in ok)


BROKEN_RULES = '''
import numpy as np
from simulator.core.engine_rules import Admission, Preemption


class Forgetful(Admission):
    def take(self, queue, room, free_kv, requests, lookahead):
        queue.popleft()  # takes a request but returns nothing


class Nobody(Preemption):
    def victim(self, batch):
        return None
'''


@pytest.mark.slow
@pytest.mark.parametrize("engine, message", [
    ({"admission": "broken_rules:Forgetful"},
     "admission rule Forgetful: take() returned None; expected a list of the request ids it took from the queue"),
    # 8 requests of 128-token prompts in a 600-slot cache: four are admitted, their growth overflows it, and the
    # rule names no row
    ({"preemption": "broken_rules:Nobody", "kv_capacity_tokens": 600},
     "preemption rule Nobody: victim() returned None; expected a row index 0..3 of the running batch (4 rows)"),
])
def test_a_broken_admission_or_preemption_plug_in_stops_a_run_with_one_line(scenario_file, tmp_path, engine,
                                                                            message):
    import subprocess
    import sys

    from tests.conftest import ROOT

    (tmp_path / "broken_rules.py").write_text(BROKEN_RULES)
    path = scenario_file(engine=engine, systems=["ar"])
    res = subprocess.run([sys.executable, "-m", "simulator.cli", "run", str(path), "--quick", "--jobs", "1",
                          "--out", str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": f"{ROOT}:{tmp_path}", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 2, res.stderr
    line = res.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith(f"error: {path}: system 'ar' at closed-8, seed ") and line.endswith(message)


@pytest.mark.slow
def test_check_lists_the_rules_each_system_runs_by(scenario_file):
    path = scenario_file(systems=["ar", "dspark", {"name": "half", "policy": "half_block:HalfBlock"}],
                         hardware={"router": "round-robin", "replicas": 2},
                         engine={"admission": "shortest_prompt_first:ShortestPromptFirst"})
    res = subprocess_check(path)
    assert res.returncode == 0, res.stderr
    rules = [line.strip() for line in res.stdout.splitlines() if line.strip().startswith("rules of ")]
    shared = ("router round-robin (built-in), admission shortest_prompt_first:ShortestPromptFirst (plug-in "
              "docs/examples/shortest_prompt_first.py), preemption newest (built-in)")
    assert rules == [f"rules of ar: policy ar (built-in), {shared}",
                     f"rules of dspark: policy dspark (built-in), {shared}",
                     f"rules of half: policy half_block:HalfBlock (plug-in docs/examples/half_block.py), {shared}"]


def subprocess_check(path):
    import subprocess
    import sys

    from tests.conftest import EXAMPLES, ROOT

    return subprocess.run([sys.executable, "-m", "simulator.cli", "check", str(path)], cwd=ROOT, capture_output=True,
                          text=True, env={"PYTHONPATH": f"{ROOT}:{EXAMPLES}", "PATH": "/usr/bin:/bin"})


class LongPromptsToZero(Router):
    """Reads the request it routes: prompts of 1,000 tokens or more to replica 0, the rest to replica 1."""

    name = "long-to-zero"

    def choose(self, request):
        return 0 if request.prompt_tokens >= 1000 else 1


def test_a_router_that_declares_request_sees_the_request_it_routes():
    sim = Simulation(EngineConfig(max_running=8, max_batch_tokens=4096, kv_capacity=100_000, replicas=2,
                                  router=LongPromptsToZero), StepPrices(flat(5.0)))
    prompts = [1200, 40, 3000, 999, 1000]
    sim.open_loop(np.zeros(5), np.array(prompts), np.full(5, 20), np.zeros(5, dtype=np.int64))
    sim.run(until=0.001)
    assert sim.requests.frame()["replica"].tolist() == [0, 1, 0, 1, 0]
    assert LongPromptsToZero(2).wants_request and not Router(2).wants_request
    check_invariants(sim)


def test_prefix_affinity_keeps_a_group_on_one_replica_until_it_is_too_busy():
    """A large group (six requests) and two small ones over three replicas: with room to spare each group stays
    on the replica its first request went to, so each prefix is computed once; allowed only two requests of
    imbalance, the large group's fourth request finds its home three ahead of the least loaded and moves."""
    prefix = np.array([0, 0, 0, 0, 0, 0, 1, 2])
    n = len(prefix)
    homes = {}
    for balance in (32, 2):
        class Affinity(PrefixAffinity):
            pass
        Affinity.balance = balance
        sim = Simulation(EngineConfig(max_running=16, max_batch_tokens=8192, kv_capacity=100_000, replicas=3,
                                      router=Affinity, shared_prefix_tokens=256), StepPrices(flat(5.0)))
        sim.open_loop(np.zeros(n), np.full(n, 400), np.full(n, 50), np.zeros(n, dtype=np.int64), prefix)
        sim.run(until=0.001)
        homes[balance] = sim.requests.frame()["replica"].tolist()
        check_invariants(sim)
    assert homes[32] == [0, 0, 0, 0, 0, 0, 1, 2]
    # loads (3, 0, 0) when the fourth arrives: 3 > 2, so it and the group move to replica 1, the least loaded
    assert homes[2] == [0, 0, 0, 1, 1, 1, 2, 2]

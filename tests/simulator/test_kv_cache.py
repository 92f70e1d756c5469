"""The KV cache as an object (simulator/core/kv_cache.py) and its prefix cache, in engine runs built in code: hits
and misses in closed form, a shared prefix held once, LRU eviction against a brute-force reference, no change
when the cache is off, lower TTFT when it is on, and the engine's invariants with prefixes and preemptions."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from hw_profile.tables.step_table import StepTimeGrid
from simulator.core.acceptance.base import AcceptanceSource, Proposal
from simulator.core.engine import Simulation, StepPrices
from simulator.core.engine_config import EngineConfig
from simulator.core.invariants import check_invariants
from simulator.core.kv_cache import COMPUTING, KVCache
from simulator.errors import UserError
from tests.simulator.engine_helpers import simulate
from tests.simulator.test_engine_in_code import assert_counts_kept, flat

ZERO = {"prefix_hits": 0, "prefix_misses": 0, "prefix_hit_tokens": 0, "prefix_evictions": 0}


def assert_kv_kept(sim: Simulation) -> None:
    """Every running total of every replica's cache equals its recount from the batch and the prefix table, and
    the use is within the capacity (between steps, where a run pauses)."""
    assert_counts_kept(sim)
    for rep in sim.replicas:
        kv, b = rep.kv, rep.batch
        p = kv.cached
        context = b.col("prompt") + b.col("generated")
        shared = b.col("kv_shared")
        assert kv.tokens == int(context.sum()) and kv.running == b.n
        assert kv.shared == p * int(np.count_nonzero(shared == p))
        assert kv.computing == int(np.count_nonzero(shared == COMPUTING))
        holders = Counter(b.col("prefix")[shared == p].tolist()) if p else Counter()
        assert {g: r for g, r in kv.refs.items() if r} == dict(holders)  # each sharer counted by its group
        assert list(kv.lru) == [g for g in kv.lru if kv.refs[g] == 0]
        assert set(kv.lru) == {g for g, r in kv.refs.items() if r == 0}
        assert kv.resident == p * len(kv.refs) and kv.evictable == p * len(kv.lru)
        used = int(context.sum()) - kv.shared + kv.resident + b.n * sim.config.lookahead
        assert rep.kv_used() == used <= sim.config.kv_capacity


def run_paused(sim: Simulation, until: float, every: float) -> None:
    for t in np.arange(every, until, every):
        if t <= sim.env.now:
            continue
        sim.run(until=t)
        assert_kv_kept(sim)
    sim.run(until=until)
    assert_kv_kept(sim)
    check_invariants(sim)


def arrive(sim: Simulation, prompt, output, prefix=None, times=None) -> None:
    n = len(prompt)
    sim.open_loop(np.zeros(n) if times is None else np.asarray(times, dtype=float), np.asarray(prompt),
                  np.asarray(output), np.zeros(n, dtype=np.int64), None if prefix is None else np.asarray(prefix))


@pytest.mark.parametrize("schedule", ["mixed", "prefill-first"])
@pytest.mark.parametrize("shared, cached", [(100, 96), (64, 64), (15, 0)])
def test_requests_in_sequence_hit_all_but_the_first_of_each_group(schedule, shared, cached):
    # G groups, N requests one after another (one running at a time): each group's first request computes its
    # prefix, every later one finds it resident and skips its full blocks (floor(T / 16) x 16 tokens)
    groups, n, prompt = 3, 12, 300
    prefix = np.arange(n) % groups
    logs = {}
    for cache in (True, False):
        sim = Simulation(EngineConfig(max_running=1, max_batch_tokens=4096, kv_capacity=100_000, schedule=schedule,
                                      shared_prefix_tokens=shared, prefix_cache=cache), StepPrices(flat(5.0)))
        arrive(sim, [prompt] * n, [5] * n, prefix)
        run_paused(sim, 2.0, 0.05)
        assert np.all(~np.isnan(sim.requests.frame()["finish"]))
        logs[cache] = sim
    hits = (n - groups) if cached else 0
    on, off = logs[True], logs[False]
    assert on.kv_stats == {"prefix_hits": hits, "prefix_misses": groups if cached else 0,
                           "prefix_hit_tokens": hits * cached, "prefix_evictions": 0}
    assert off.kv_stats == ZERO
    saved = off.steps.frame()["prefill_tokens"].sum() - on.steps.frame()["prefill_tokens"].sum()
    assert saved == hits * cached
    assert on.replicas[0].kv.resident == groups * cached  # every prefix still cached, unreferenced
    assert on.replicas[0].kv.evictable == groups * cached


def test_a_prompt_that_is_only_the_prefix_recomputes_its_last_block():
    # vLLM always computes the last prompt token: a hit on a 64-token prompt that is all prefix skips 48 tokens
    sim = Simulation(EngineConfig(max_running=1, max_batch_tokens=4096, kv_capacity=10_000, shared_prefix_tokens=64),
                     StepPrices(flat(5.0)))
    arrive(sim, [64, 64, 64], [3, 3, 3], [7, 7, 7])
    run_paused(sim, 1.0, 0.01)
    assert sim.kv_stats == {"prefix_hits": 2, "prefix_misses": 1, "prefix_hit_tokens": 2 * 48, "prefix_evictions": 0}


def test_two_requests_of_one_group_hold_the_prefix_once():
    # A (100-token prompt, 64 of them the group's prefix) prefills in the first step; B of the same group arrives
    # during the second and joins at its end, prefilling 36 tokens. Both running hold 100 + 102 - 64 tokens plus a
    # lookahead slot each: 140. In a 160-slot cache B fits only because the prefix is held once; without the
    # cache it needs 101 slots beside A's 103 and waits for A to finish (10 steps of 5 ms).
    admitted, rows = {}, {}
    for cache in (True, False):
        sim = Simulation(EngineConfig(max_running=2, max_batch_tokens=4096, kv_capacity=160, shared_prefix_tokens=64,
                                      prefix_cache=cache), StepPrices(flat(5.0)))
        arrive(sim, [100, 100], [10, 10], [3, 3], times=[0.0, 0.0075])
        run_paused(sim, 1.0, 0.0025)
        admitted[cache] = sim.requests.frame()["admitted"]
        st = sim.steps.frame()
        rows[cache] = st
    assert admitted[True][1] == pytest.approx(0.010)
    assert admitted[False][1] == pytest.approx(0.050)
    third = rows[True]
    assert third["start"][2] == pytest.approx(0.010)
    assert third["kv_used"][2] == 100 + 102 - 64 + 2
    assert third["prefill_tokens"][2] == 36
    assert third["kv_tokens"][2] == 102 + 64  # K: A's context and the cached prefix B reads


def test_misses_admitted_together_each_compute_the_prefix_and_one_keeps_it():
    # two requests of one group join in one step: both miss and compute the prefix; the first row to pass it holds
    # it shared, the other keeps its own copy (as vLLM keeps duplicate blocks); a third, later, hits
    sim = Simulation(EngineConfig(max_running=3, max_batch_tokens=4096, kv_capacity=10_000, shared_prefix_tokens=32),
                     StepPrices(flat(5.0)))
    arrive(sim, [50, 50, 50], [20, 20, 20], [1, 1, 1], times=[0.0, 0.0, 0.012])
    sim.run(until=0.006)
    assert sim.replicas[0].batch.col("kv_shared").tolist() == [32, 0]
    assert sim.replicas[0].kv_used() == 51 + 51 + 2  # the copy and the shared prefix: 32 twice, as computed
    run_paused(sim, 1.0, 0.005)
    assert sim.kv_stats == {"prefix_hits": 1, "prefix_misses": 2, "prefix_hit_tokens": 32, "prefix_evictions": 0}


def lru_reference(groups: list[int], slots: int, solo_slots: int) -> tuple[list[bool], list[int]]:
    """Brute force: which requests hit and which prefixes are evicted, in order, when requests run one at a time,
    ``slots`` prefixes fit beside a request of a group (its own included) and ``solo_slots`` beside one with none;
    the least recently used prefix is evicted first."""
    cache: list[int] = []  # least recently used first
    hits, evicted = [], []
    for g in groups:
        if g < 0:
            while len(cache) > solo_slots:
                evicted.append(cache.pop(0))
            hits.append(False)
            continue
        hit = g in cache
        hits.append(hit)
        if hit:
            cache.remove(g)
        else:
            while len(cache) >= slots:
                evicted.append(cache.pop(0))
        cache.append(g)
    return hits, evicted


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lru_eviction_matches_a_brute_force_reference(seed):
    # prompts of 100 tokens, outputs of 20, prefix 64 (70 shared tokens: four full blocks), one lookahead slot: a
    # running request needs 121 slots at most, so a 249-slot cache holds its prefix and two others, or two
    # prefixes beside a request without one
    rng = np.random.default_rng(seed)
    groups = rng.integers(-1, 5, 60)
    sim = Simulation(EngineConfig(max_running=1, max_batch_tokens=4096, kv_capacity=121 + 2 * 64,
                                  shared_prefix_tokens=70), StepPrices(flat(5.0)))
    kv = sim.replicas[0].kv
    evicted: list[int] = []
    evict = kv.evict_lru
    kv.evict_lru = lambda: evicted.append(evict()) or evicted[-1]
    arrive(sim, [100] * len(groups), [20] * len(groups), groups)
    run_paused(sim, 10.0, 0.1)
    rq = sim.requests.frame()
    assert np.all(~np.isnan(rq["finish"])) and rq["preemptions"].sum() == 0
    hits, expect_evicted = lru_reference(groups.tolist(), 3, 2)
    assert evicted == expect_evicted
    n_hits = sum(hits)
    assert sim.kv_stats == {"prefix_hits": n_hits, "prefix_misses": int((groups >= 0).sum()) - n_hits,
                            "prefix_hit_tokens": 64 * n_hits, "prefix_evictions": len(expect_evicted)}
    # a hit prefills its 36 unshared tokens, a miss (or a request without a prefix) all 100
    first_chunk = np.where(hits, 36, 100)
    chunks = sim.steps.frame()["prefill_tokens"]
    assert chunks[chunks > 0].tolist() == first_chunk.tolist()


class RandomDrafts(AcceptanceSource):
    """Random confidences and accepted counts from a seeded stream."""

    def __init__(self, gamma: int, seed: int = 0):
        self.gamma = gamma
        self.rng = np.random.default_rng(seed)

    def attach(self, ids, mix_index):
        pass

    def propose(self, ids):
        return Proposal(confidence=self.rng.uniform(0.2, 1.0, (len(ids), self.gamma)))

    def verify(self, proposal, lengths):
        return np.minimum(lengths, self.rng.integers(0, self.gamma + 1, len(lengths)))

    def detach(self, ids):
        pass


def tight_run(schedule: str, cache: bool, prefix: bool, replicas: int = 1, seed: int = 0,
              until: float = 3.0, every: float | None = 0.05) -> Simulation:
    """Speculative decoding (gamma 3, static-3) in a cache small enough to preempt, with prefixes of 8 groups."""
    rng = np.random.default_rng(seed)
    n = 120
    prompt = rng.integers(300, 700, n)
    output = rng.integers(20, 300, n)
    groups = rng.integers(-1, 8, n)
    times = np.sort(rng.uniform(0, 2.0, n))
    sim = Simulation(EngineConfig(max_running=16, max_batch_tokens=1024, kv_capacity=3000, gamma=3, prefill_chunk=256,
                                  schedule=schedule, replicas=replicas, shared_prefix_tokens=250, prefix_cache=cache),
                     StepPrices(flat(5.0)), source=RandomDrafts(3, seed), policy="static-3")
    arrive(sim, prompt, output, groups if prefix else None, times)
    if every is None:
        sim.run(until=until)
        check_invariants(sim)
    else:
        run_paused(sim, until, every)
    return sim


@pytest.mark.parametrize("schedule, replicas", [("mixed", 1), ("prefill-first", 1), ("mixed", 2)])
def test_invariants_hold_with_prefixes_and_preemptions(schedule, replicas):
    sim = tight_run(schedule, True, True, replicas)
    stats = sim.kv_stats
    assert sim.preemptions > 0, "the tight cache must force recompute preemptions"
    assert stats["prefix_hits"] > 0 and stats["prefix_misses"] > 0 and stats["prefix_evictions"] > 0
    assert stats["prefix_hit_tokens"] == 240 * stats["prefix_hits"]  # prompts are longer than the prefix
    assert np.all(sim.steps.frame()["kv_used"] <= 3000)


def test_the_cache_off_gives_the_numbers_of_a_run_without_prefixes():
    off = tight_run("mixed", False, True, every=None)
    none = tight_run("mixed", True, False, every=None)
    assert off.kv_stats == none.kv_stats == ZERO
    a, b = off.steps.frame(), none.steps.frame()
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    a, b = off.requests.frame(), none.requests.frame()
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a if k != "prefix")
    assert off.preemptions == none.preemptions > 0


def test_prefix_caching_lowers_ttft():
    # 2000-token prompts sharing 1800 tokens in 4 groups, on a table whose step time grows with the batch's tokens
    grid = StepTimeGrid.from_points(np.array([1, 1, 4096, 4096]), np.array([0, 1e6, 0, 1e6]),
                                    np.array([10.0, 10.0, 60.0, 60.0]))
    rng = np.random.default_rng(3)
    n = 200
    times = np.cumsum(rng.exponential(0.05, n))
    output = rng.integers(50, 200, n)
    ttft = {}
    for cache in (True, False):
        sim = Simulation(EngineConfig(max_running=32, max_batch_tokens=2048, kv_capacity=200_000, prefill_chunk=512,
                                      shared_prefix_tokens=1800, prefix_cache=cache), StepPrices(grid))
        arrive(sim, np.full(n, 2000), output, np.arange(n) % 4, times)
        sim.run(until=60.0)
        check_invariants(sim)
        rq = sim.requests.frame()
        assert np.all(~np.isnan(rq["first_token"]))
        ttft[cache] = float(np.mean(rq["first_token"] - rq["arrival"]))
    assert ttft[True] < 0.5 * ttft[False]


def test_admission_counts_a_held_prefix_once_in_one_round():
    # unit: a resident prefix nobody holds is room until a request takes it; the second request of the group in
    # the same round needs its context less the prefix
    kv = KVCache(1000, 1, prefix_tokens=40)
    assert kv.cached == 32
    ctx = np.array([100])
    to_prefill = ctx.copy()
    kv.join(ctx, to_prefill, np.array([5]), 100)  # a miss
    kv.prefill_progress(np.array([COMPUTING]), np.array([5]), np.array([0]), np.array([100]))
    kv.leave(100, 1, np.array([32]), np.array([5]))
    assert (kv.used(), kv.evictable, kv.room()) == (32, 32, 1000)
    req = {"prompt": np.array([100, 100, 100]), "generated": np.array([0, 0, 0]), "prefix": np.array([5, 5, -1])}
    claims = kv.claims(req)
    assert claims.need(0) == 101  # takes the unreferenced prefix out of the room it was counted in
    claims.take(0)
    assert (claims.need(1), claims.need(2)) == (101 - 32, 101)


def test_a_prefix_must_fit_its_prompt_and_be_a_group():
    sim = Simulation(EngineConfig(max_running=1, max_batch_tokens=64, kv_capacity=1000, shared_prefix_tokens=64),
                     StepPrices(flat(5.0)))
    with pytest.raises(UserError, match="prefix group 2 has a 50-token prompt, shorter than the shared prefix"):
        sim.submit(np.array([100, 50]), np.array([5, 5]), np.zeros(2, dtype=np.int64), np.array([1, 2]))
    with pytest.raises(UserError, match="prefix: a group is -1"):
        sim.submit(np.array([100]), np.array([5]), np.zeros(1, dtype=np.int64), np.array([-2]))
    with pytest.raises(ValueError, match=r"EngineConfig\.shared_prefix_tokens"):
        EngineConfig(max_running=1, max_batch_tokens=64, kv_capacity=1000, shared_prefix_tokens=-1)


def test_a_closed_loop_draw_may_carry_prefix_groups():
    sim = Simulation(EngineConfig(max_running=4, max_batch_tokens=4096, kv_capacity=10_000, shared_prefix_tokens=128),
                     StepPrices(flat(5.0)))
    zeros = lambda n: np.zeros(n, dtype=np.int64)  # noqa: E731
    sim.closed_loop(4, lambda n: (np.full(n, 200), np.full(n, 10), zeros(n), zeros(n)))  # four items: with prefixes
    run_paused(sim, 0.5, 0.02)
    stats = sim.kv_stats
    assert stats["prefix_misses"] == 4 and stats["prefix_hits"] > 20  # the first four compute it together
    assert stats["prefix_hit_tokens"] == 128 * stats["prefix_hits"]


def test_a_scenario_run_reports_the_prefix_counters(scenario_file):
    path = scenario_file(systems=["ar"], engine={"prefix_cache": False}, frontier={"concurrency": [4]})
    row, sim = simulate(path, quick=True)
    assert not sim.config.prefix_cache
    assert {k: row[k] for k in ZERO} == ZERO

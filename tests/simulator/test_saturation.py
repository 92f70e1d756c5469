"""Saturation judged at the window's end: the prefill pool by one rule with the decode queue, the same for every
decode system behind it; and overload the running batch absorbs (requests unfinished at the drain cap)."""

from __future__ import annotations

import simpy

from simulator.core.prefill import PrefillPool
from tests.simulator.engine_helpers import simulate
from tests.simulator.test_plan import linear_grid


def feed(env: simpy.Environment, pool: PrefillPool, every_s: float, prompt: int, start: float, stop: float):
    """A prompt of ``prompt`` tokens every ``every_s`` seconds in [start, stop)."""
    def proc():
        yield env.timeout(start)
        rid = 0
        while env.now < stop - 1e-12:
            pool.submit(rid, prompt)
            rid += 1
            yield env.timeout(every_s)
    env.process(proc())


# one replica, forwards of up to 4000 tokens at 2 ms + 0.01 ms/token: 4000 tokens per 42 ms, ~95k tokens/s
GRID = linear_grid(2.0, 0.01)
END = 10.0


def pool_run(schedule: list[tuple[float, float, float]]) -> PrefillPool:
    env = simpy.Environment()
    pool = PrefillPool(env, 1, GRID, 4000, lambda rid: None)
    for every_s, start, stop in schedule:
        feed(env, pool, every_s, 1000, start, stop)
    env.run()
    return pool


def test_a_pool_overloaded_through_the_window_is_saturated_though_it_drains_afterwards():
    # 200k tokens/s offered for the whole window, nothing after: the backlog grows to the end, then drains
    pool = pool_run([(0.005, 0.0, END)])
    capacity = 4000 / 0.042
    assert pool.backlog_at(END) > 0.9 * (200_000 - capacity) * END
    assert pool.backlog_at(END) > pool.backlog_at(END / 2)
    assert pool.saturated(END)
    assert pool.backlog_log[-1][1] == 0  # at the drain's end the pool is empty: the old reading said "fine"


def test_load_after_the_window_does_not_saturate_the_pool():
    # 50k tokens/s in the window (about half the capacity), 200k tokens/s only after it: the window was served
    pool = pool_run([(0.02, 0.0, END), (0.005, END, 2 * END)])
    assert pool.backlog_at(END) <= 4000
    assert not pool.saturated(END)
    assert max(b for _, b in pool.backlog_log) > 100 * 4000  # the drain's queue, which the old rule read


def test_one_pool_under_one_set_of_arrivals_is_judged_the_same_behind_every_decode_system(scenario_file):
    # 2 prefill replicas for 40 prompts/s of 3000 tokens: short of the ~3 needed, a backlog that grows
    path = scenario_file(systems=["mtp-1", "dspark"], frontier=None, traffic={"kind": "poisson", "rate": 40.0},
                         workload={"prompt": 3000, "output": 48},
                         engine={"max_running": 64, "max_batch_tokens": 4096, "prefill": "disaggregated"},
                         hardware={"prefill_replicas": 2})
    rows, sims = zip(*(simulate(path, s, concurrency=None, quick=True) for s in ("mtp-1", "dspark")), strict=True)
    end = rows[0]["sim_seconds"]
    at = [(sim.prefill_pool.backlog_at(end / 2), sim.prefill_pool.backlog_at(end)) for sim in sims]
    assert at[0] == at[1] and at[0][1] > 0
    assert rows[0]["prefill_saturated"] and rows[1]["prefill_saturated"]
    # and scored over the same requests (one window at an open-loop point), its TTFT is the same number too
    assert rows[0]["requests"] == rows[1]["requests"] and rows[0]["ttft_p99"] == rows[1]["ttft_p99"]


def absorbing_scenario(scenario_file, rate: float):
    """Co-located prefill, a batch that admits up to 2,048 requests: overload joins the batch, not a queue."""
    return scenario_file(systems=["mtp-1"], frontier=None, traffic={"kind": "poisson", "rate": rate},
                         engine={"max_running": 2048, "max_batch_tokens": 8192}, workload={"prompt": 128, "output": 48})


def test_overload_the_batch_absorbs_is_flagged_where_saturated_is_not(scenario_file, tmp_path):
    from simulator.inputs.config import load_scenario
    from simulator.outputs.metrics import OVERLOAD_SHARE
    from simulator.outputs.summary import build_summary, flag_hint, flag_lines, headline_table
    from simulator.runs.plan import Target, shortfall
    from simulator.runs.sweep import Sweep

    light, _ = simulate(absorbing_scenario(scenario_file, 100.0), concurrency=None, quick=True)
    assert light["unfinished"] == 0 and not light["overloaded"] and not light["saturated"]
    path = absorbing_scenario(scenario_file, 250.0)
    row, sim = simulate(path, concurrency=None, quick=True)
    # no queue to speak of (the batch takes nearly every arrival), yet the followed requests cannot finish
    assert not row["saturated"] and row["unfinished"] > OVERLOAD_SHARE * row["requests"]
    assert row["overloaded"] and row["sla_attainment"] < 0.5
    assert sim.steps.frame()["queued"].max() < 0.1 * 2048  # a queue under saturated's threshold
    assert shortfall(row, Target(tps=100.0, attainment=0.5)).startswith("overloaded (")
    scn = load_scenario(path)
    sweep = Sweep.plan(scn, tmp_path / "o", quick=True, seed=None, replicates=None)
    sweep.execute(jobs=1)
    summary = build_summary(scn, sweep.results())
    assert summary["systems"]["mtp-1"]["open_loop"]["overloaded"] is True
    assert headline_table(summary)["system"].tolist() == ["mtp-1 !"]
    assert flag_lines(summary) == [f"! overloaded at open (mtp-1): {flag_hint('overloaded', ['open'], quick=True)}"]
    # an open-loop point is told to take less traffic or more replicas, not fewer users
    assert "traffic.rate" in flag_lines(summary)[0] and "frontier.concurrency" not in flag_lines(summary)[0]

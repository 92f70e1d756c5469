"""A benchmark client's finite run (``simulator.runs.batch``): N prompts at most C at a time, measured from the
first request to the last. Closed forms on a flat table, the limits it keeps, its convergence to the steady closed
loop as the list grows, and the error of a run that cannot finish."""

from __future__ import annotations

import numpy as np
import pytest

from hw_profile.tables.step_table import StepTable
from simulator.core.invariants import check_invariants
from simulator.errors import UserError
from simulator.inputs.config import load_scenario
from simulator.inputs.systems import resolve_systems
from simulator.runs.batch import run_batch
from simulator.runs.run import LoadPoint, RunSpec, run_one

STEP_MS = 10.0


@pytest.fixture
def flat_scenario(scenario_file, tmp_path):
    """Every step costs STEP_MS whatever it holds: a request of o output tokens takes o steps (its prefill emits
    the first), so a wave of requests that start together takes o x STEP_MS."""
    flat = StepTable.from_points([{"batch_tokens": b, "kv_tokens": k, "status": "ok", "step_ms": STEP_MS}
                                  for b in (1, 100_000) for k in (0, 10_000_000)])
    table = flat.write(tmp_path / "flat.csv")

    def make(output: int = 5, **fields):
        fields = {"hardware": {"table": str(table)}, "systems": ["ar"], "engine": {"kv_capacity_tokens": 1_000_000},
                  "workload": {"prompt": 64, "output": output}, **fields}
        path = scenario_file(**fields)
        scn = load_scenario(path)
        return scn, resolve_systems(scn)[0]

    return make


@pytest.mark.parametrize(("concurrency", "requests", "waves"), [(4, 8, 2), (4, 6, 2), (3, 3, 1), (1, 5, 5)])
def test_waves_of_a_flat_table_take_their_closed_form(flat_scenario, concurrency, requests, waves):
    """C requests start together, finish together after o steps, and the next C take their places: the run lasts
    ceil(N / C) waves of o steps, every request counted, TTFT one step and TPOT one step."""
    scn, system = flat_scenario(output=5)
    res, sim = run_batch(scn, system, concurrency, requests)
    check_invariants(sim)
    assert res.requests == requests and res.rejected == 0
    assert res.seconds == pytest.approx(waves * 5 * STEP_MS / 1e3)
    assert res.output_tokens == 5 * requests and res.prompt_tokens == 64 * requests
    assert res.output_per_gpu == pytest.approx(5 * requests / res.seconds)
    assert res.total_per_gpu == pytest.approx(69 * requests / res.seconds)
    assert res.ttft_ms == pytest.approx(STEP_MS) and res.tpot_ms == pytest.approx(STEP_MS)
    assert res.tau == pytest.approx(1.0)
    steps = sim.steps.frame()
    assert steps["running"].max() == min(concurrency, requests)  # never more than C at once
    assert sim.requests.n == requests  # and none once the list is spent


def test_the_same_list_at_every_concurrency(flat_scenario):
    """A client draws its prompts from one seeded list: runs of one list at two concurrencies serve the same
    requests, and the higher concurrency finishes sooner."""
    scn, system = flat_scenario(workload={"prompt": {"dist": "uniform", "low": 16, "high": 512},
                                          "output": {"dist": "uniform", "low": 2, "high": 40}})
    one, sim1 = run_batch(scn, system, 1, 12)
    many, sim8 = run_batch(scn, system, 8, 12)
    assert np.array_equal(np.sort(sim1.requests.frame()["prompt"]), np.sort(sim8.requests.frame()["prompt"]))
    assert one.output_tokens == many.output_tokens and one.prompt_tokens == many.prompt_tokens
    assert many.seconds < one.seconds


@pytest.mark.slow
def test_a_long_list_approaches_the_steady_closed_loop(scenario_file):
    """On a real table, the ramp-up and the drain weigh less as the list grows: 20 requests at 16 a time lose a
    large share of the steady loop's throughput, 640 within a few percent of it."""
    path = scenario_file(systems=["ar"], workload={"prompt": 256, "output": {"dist": "uniform", "low": 16,
                                                                               "high": 256}},
                         run={"duration_s": 600.0, "warmup_s": 5.0, "drain_cap_s": 0.0})
    scn = load_scenario(path)
    system = resolve_systems(scn)[0]
    steady, _ = run_one(scn, RunSpec(system, LoadPoint(16), 0, False))
    short, _ = run_batch(scn, system, 16, 20)
    long_, _ = run_batch(scn, system, 16, 640)
    assert short.output_per_gpu < 0.85 * steady["throughput_per_gpu"]
    assert long_.output_per_gpu == pytest.approx(steady["throughput_per_gpu"], rel=0.05)


def test_a_run_that_cannot_finish_in_time_says_so(flat_scenario):
    scn, system = flat_scenario(output=200, run={"duration_s": 1.0, "warmup_s": 0.5})  # 3 waves of 2 s each
    with pytest.raises(UserError, match=r"ar.*6 requests at 2 at a time: 6 unfinished after run.duration_s 1 "):
        run_batch(scn, system, 2, 6)
    with pytest.raises(UserError, match="concurrency >= 1 and requests >= 1, got 2 and 0"):
        run_batch(scn, system, 2, 0)


def test_a_scenario_point_with_a_prompt_list_is_that_finite_run(flat_scenario):
    """`frontier.requests` makes each point its finite list: runs.csv's row is the whole list, measured from its
    first request to its last, as run_batch measures it."""
    from simulator.runs.run import load_points

    scn, system = flat_scenario(output=5, frontier={"concurrency": [4, 2], "requests": [8, 3]})
    points = load_points(scn)
    assert [(p.concurrency, p.requests, p.label) for p in points] == [(4, 8, "closed-4-of-8"), (2, 3, "closed-2-of-3")]
    row, sim = run_one(scn, RunSpec(system, points[0], 0, False))
    check_invariants(sim)
    res, _ = run_batch(scn, system, 4, 8)
    assert row["sim_seconds"] == pytest.approx(res.seconds) == pytest.approx(0.1)
    assert row["warmup_s"] == 0.0 and row["drain_seconds"] == 0.0
    assert row["requests"] == 8 and row["unfinished"] == 0
    assert row["throughput_per_gpu"] == pytest.approx(res.output_per_gpu)
    assert row["bench"]["completed"] == 8


@pytest.mark.parametrize(("requests", "why"), [([8], "one count per concurrency point \\(2\\), got 1"),
                                               ([8, 1], "1 prompts at concurrency 2: a list no shorter than its")])
def test_a_prompt_list_that_does_not_fit_the_frontier_is_one_line(flat_scenario, requests, why):
    with pytest.raises(UserError, match=f"frontier.*requests: {why}"):
        flat_scenario(frontier={"concurrency": [4, 2], "requests": requests})


def test_a_list_none_of_which_fits_the_cache_says_so(flat_scenario):
    scn, system = flat_scenario(engine={"kv_capacity_tokens": 32})  # 64-token prompts never fit
    with pytest.raises(UserError, match="closed-2-of-4, seed 0: none of the 4 requests fits the KV cache"):
        run_batch(scn, system, 2, 4)


def test_a_refused_prompt_is_followed_by_the_next_one(flat_scenario):
    """A prompt the KV cache can never hold is refused, and the client sends its next one at once: the whole list
    is sent, the refused ones counted apart."""
    scn, system = flat_scenario(engine={"kv_capacity_tokens": 300},
                                workload={"prompt": {"dist": "uniform", "low": 16, "high": 512}})
    res, sim = run_batch(scn, system, 4, 24)
    check_invariants(sim)
    assert sim.requests.n == 24 and res.rejected > 0 and res.requests + res.rejected == 24
    req = sim.requests.frame()
    assert res.requests == int((req["prompt"] + req["output"] + sim.config.lookahead <= 300).sum())

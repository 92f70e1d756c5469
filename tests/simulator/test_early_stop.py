"""A plan's early stops (simulator/runs/run.py EarlyStop, simulator/runs/search.py): a run may end once its SLA
verdict is a certain failure. Checked against brute force over every way the rest of a run could go, the TTFT
count in closed form, real runs against the same runs in full, and whole plans against the exhaustive search."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.inputs.config import load_scenario
from simulator.inputs.systems import resolve_systems
from simulator.outputs.metrics import request_metrics
from simulator.runs.backends import Backend
from simulator.runs.plan import Candidate, Planner, Target, shortfall
from simulator.runs.run import LoadPoint, RunSpec, StopRule, certain_failure, run_one
from tests.simulator.test_plan import small_plan_scenario

WARMUP, END = 1.0, 10.0


def log_at(now: float, arrival, first, finish, output, rejected=None) -> dict:
    """A request log as a run has it at ``now``: NaN where a first token or a finish is still to come."""
    n = len(arrival)
    return {"arrival": np.asarray(arrival, float), "first_token": np.asarray(first, float),
            "finish": np.asarray(finish, float), "output": np.asarray(output, np.int64),
            "generated": np.ones(n, np.int64), "rejected": np.zeros(n, bool) if rejected is None else rejected,
            "routed": np.asarray(arrival, float), "admitted": np.asarray(arrival, float),
            "preemptions": np.zeros(n, np.int64)}


@st.composite
def runs_at(draw):
    """A request log at ``now`` and one way the rest of the run could go: later first tokens and finishes, and
    requests still to arrive in the window, some of them rejected."""
    now = draw(st.floats(WARMUP + 0.1, END + 5.0))
    n = draw(st.integers(1, 40))
    arrival = np.sort(np.array(draw(st.lists(st.floats(0.0, min(now, END + 5.0)), min_size=n, max_size=n))))
    output = np.array(draw(st.lists(st.integers(1, 60), min_size=n, max_size=n)))
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    for i in range(n):
        state = draw(st.integers(0, 2))  # 0: waiting, 1: decoding, 2: finished
        if state >= 1:
            first[i] = draw(st.floats(arrival[i], now))
        if state == 2:
            finish[i] = draw(st.floats(first[i], now))
    later = draw(st.integers(0, 10))  # still to arrive in the window (none once it has ended)
    late = np.sort(np.array(draw(st.lists(st.floats(now, END), min_size=later, max_size=later)))) if now < END else np.array([])
    window_arrivals = int(((arrival >= WARMUP) & (arrival < END)).sum() + len(late))
    # the rest of the run: every open request gets its first token and finishes at or after now, or never
    cont_first, cont_finish = first.copy(), finish.copy()
    for i in range(n):
        if np.isnan(cont_first[i]):
            cont_first[i] = now + draw(st.floats(0.0, 20.0))
        if np.isnan(cont_finish[i]) and draw(st.booleans()):
            cont_finish[i] = max(cont_first[i], now) + draw(st.floats(0.0, 20.0))
    late_first = late + np.array(draw(st.lists(st.floats(0.0, 5.0), min_size=len(late), max_size=len(late))))
    late_out = np.array(draw(st.lists(st.integers(1, 60), min_size=len(late), max_size=len(late))), dtype=np.int64)
    late_rejected = np.array(draw(st.lists(st.booleans(), min_size=len(late), max_size=len(late))), dtype=bool)
    final = log_at(now, np.concatenate([arrival, late]), np.concatenate([cont_first, late_first]),
                   np.concatenate([cont_finish, late_first + 0.5]), np.concatenate([output, late_out]),
                   np.concatenate([np.zeros(n, bool), late_rejected]))
    stop = max(now, float(np.nanmax(final["finish"], initial=now))) + 1.0  # a drain cap after every finish
    return log_at(now, arrival, first, finish, output), now, window_arrivals, final, stop


@settings(max_examples=250, deadline=None)
@given(case=runs_at(), tps=st.floats(1.0, 60.0), attainment=st.sampled_from([0.5, 0.9, 0.99]),
       ttft=st.floats(0.1, 5.0))
@pytest.mark.slow
def test_a_certain_failure_fails_however_the_run_goes_on(case, tps, attainment, ttft):
    """Brute force over the rest of the run: whatever ``certain_failure`` calls failed at ``now`` fails in every
    continuation drawn, by the very metrics the full run is judged by."""
    req, now, window_arrivals, final, stop = case
    found = certain_failure(req, now, WARMUP, END, window_arrivals, StopRule(tps, attainment, ttft))
    if found is None:
        return
    m = request_metrics(final, WARMUP, END, stop, tps)
    if found["test"] == "attainment":
        assert m["sla_attainment"] <= found["attainment_at_most"] + 1e-12 and m["sla_attainment"] < attainment
    else:
        assert m["ttft_p99"] > ttft


def test_the_ttft_count_forces_the_percentile_over_the_limit_for_every_count_the_run_can_end_with():
    """Closed form, checked exhaustively: with W arrivals in the window, more than W - floor(0.99 (W - 1))
    requests over the limit put numpy's p99 over it for every n <= W requests the run follows, however little
    they are over and however far below the others are."""
    limit = 1.0
    for w in range(1, 600):
        over = w - math.floor(0.99 * (w - 1)) + 1
        for n in sorted({over, over + 1, (over + w) // 2, w - 1, w} & set(range(over, w + 1))):
            values = np.r_[np.zeros(n - over), np.full(over, np.nextafter(limit, 2.0))]
            assert np.percentile(values, 99) > limit, (w, n)


def test_a_run_that_does_not_stop_is_the_full_run(scenario_file, tmp_path):
    """The same candidate with and without a stop rule, where it meets: the same row, wall time aside."""
    scn = load_scenario(small_plan_scenario(scenario_file))
    target = Target(tps=100.0, attainment=0.9, ttft_p99=1.0)
    planner = Planner(scn, tmp_path / "o", target, Backend("local", 1), quick=True)
    system = resolve_systems(planner.scn)[1]  # dspark
    variant = planner.variant(Candidate(system, 2))
    plain, _ = run_one(variant, RunSpec(system, LoadPoint(None), 0, True))
    ruled, _ = run_one(variant, RunSpec(system, LoadPoint(None), 0, True, stop=planner.rule("decode+ttft")))
    assert shortfall(plain, target) is None and "stopped" not in ruled
    assert json.dumps({**plain, "wall_seconds": 0}, default=str) == json.dumps({**ruled, "wall_seconds": 0}, default=str)


@pytest.mark.parametrize("tps,replicas,scale,judged,test", [
    (100.0, 1, 5.0, "decode+ttft", "ttft"),       # a prefill backlog: TTFT, mid-window
    (100.0, 2, 6.0, "decode", "saturated"),       # the decode queue, at the window's end
    (400.0, 1, 2.0, "decode", "attainment"),      # too slow per user, mid-window
])
def test_an_early_stopped_run_fails_as_the_full_run_does_and_sooner(scenario_file, tmp_path, tps, replicas, scale,
                                                                   judged, test):
    scn = load_scenario(small_plan_scenario(scenario_file))
    target = Target(tps=tps, attainment=0.9, ttft_p99=1.0)
    planner = Planner(scn, tmp_path / "o", target, Backend("local", 1))
    system = resolve_systems(planner.scn)[0]
    variant = planner.variant(Candidate(system, replicas, scale))
    plain, _ = run_one(variant, RunSpec(system, LoadPoint(None), 0, False))
    ruled, _ = run_one(variant, RunSpec(system, LoadPoint(None), 0, False, stop=planner.rule(judged)))
    ttft = judged == "decode+ttft"
    assert shortfall(plain, target, ttft) is not None  # the case fails in full, or the test proves nothing
    assert ruled["stopped"]["test"] == test
    assert ruled["stopped"]["at_s"] < plain["sim_seconds"] + plain["drain_seconds"]
    assert shortfall(ruled, target, ttft) is not None
    if test == "saturated":  # read where the full run reads it: the same words
        assert shortfall(ruled, target, ttft) == shortfall(plain, target, ttft)
    else:  # the figures of a run cut short are not kept as the window's
        assert "series" not in ruled and ruled["saturated"] is None


def comparable(doc: dict) -> dict:
    """What a plan decides and reports, its search log aside."""
    keys = ("status", "gpus", "gpus_lo", "replicas", "prefill_replicas", "headroom", "headroom_hi", "attainment",
            "attainment_lo", "attainment_hi", "ttft_p99", "why_unmet", "max_rate_per_replica")
    return {"systems": {k: {f: e[f] for f in keys} for k, e in doc["systems"].items()},
            "prefill": doc["prefill"] and {k: doc["prefill"][k] for k in ("replicas", "met", "why_unmet")},
            "verdict": doc["verdict"], "engine": doc["engine"]}


@pytest.mark.slow
@pytest.mark.parametrize("disaggregated", [False, True])
def test_the_early_stopping_plan_decides_as_the_exhaustive_one(scenario_file, tmp_path, disaggregated):
    """Three seeds, systems that fail at one replica and meet at more, a headroom search: the plan with early
    stops and lazy seeds reports what the exhaustive plan reports, on fewer simulated seconds; some of its runs
    did stop early, or the comparison would prove nothing."""
    extra = {"engine": {"max_running": 32, "max_batch_tokens": 4096, "prefill": "disaggregated"},
             "workload": {"prompt": 1500, "output": 48}, "traffic": {"kind": "poisson", "rate": 40.0}} \
        if disaggregated else {}
    scn = load_scenario(small_plan_scenario(scenario_file, **extra))
    target = Target(tps=100.0, attainment=0.9, ttft_p99=0.5, max_gpus=16, rate_tolerance=0.2)
    docs, simulated = {}, {}
    for mode in (True, False):
        planner = Planner(scn, tmp_path / str(mode), target, Backend("local", 2), quick=True, replicates=3,
                          exhaustive=mode)
        docs[mode] = planner.run()
        rows = [json.loads(p.read_text()) for p in (tmp_path / str(mode) / ".runs").glob("*.json")]
        simulated[mode] = sum(r["stopped"]["at_s"] if r.get("stopped") else r["sim_seconds"] + r["drain_seconds"]
                              for r in rows)
    assert comparable(docs[False]) == comparable(docs[True])
    logs = [t for e in docs[False]["systems"].values() for t in e["search"]]
    assert any(t["seeds_stopped_early"] for t in logs)
    assert simulated[False] < simulated[True]

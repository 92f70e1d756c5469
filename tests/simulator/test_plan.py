"""simulate plan: the searches against brute force, the prefill pool's timing in closed form, a whole plan on a
small scenario (fewest replicas really the fewest, resumable from the run store) and the verdict."""

from __future__ import annotations

import html
import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import simpy
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hw_profile.tables.step_table import StepTimeGrid
from simulator.core.prefill import PrefillPool
from simulator.inputs.config import load_scenario
from simulator.outputs.capacity_report import binds_line, format_plan, notes_html, unmet_lines
from simulator.outputs.verdicts import verdict
from simulator.runs.backends import Backend
from simulator.runs.plan import (
    MET,
    UNMET,
    Planner,
    Target,
    fewest,
    most_traffic,
    prefill_bound,
    write_plan,
)
from tests.conftest import ROOT


def drive(search, ok):
    """Run a search generator against a predicate; returns (result, probes)."""
    probes = []
    try:
        x = next(search)
        while True:
            probes.append(x)
            x = search.send(ok(x))
    except StopIteration as stop:
        return stop.value, probes


@given(cap=st.integers(1, 200), threshold=st.integers(1, 260))
def test_fewest_is_the_smallest_count_that_meets_in_logarithmic_probes(cap, threshold):
    found, probes = drive(fewest(cap), lambda n: n >= threshold)
    brute = next((n for n in range(1, cap + 1) if n >= threshold), None)
    assert found == brute
    assert all(1 <= n <= cap for n in probes)
    assert len(probes) <= 2 * math.ceil(math.log2(cap)) + 2
    if found is not None and found > 1:
        assert found - 1 in probes  # the answer's neighbour below was tried and failed


@settings(max_examples=200)
@given(limit=st.floats(0.02, 40.0), guess=st.floats(1.0, 3.0), tol=st.sampled_from([0.01, 0.05, 0.2]))
def test_most_traffic_brackets_the_limit_within_the_tolerance(limit, guess, tol):
    found, _ = drive(most_traffic(limit >= 1.0, guess, tol), lambda s: s <= limit)
    assert found <= limit
    assert limit < found * (1 + tol) + 1e-12 or (found == 0.0 and limit < 1 / 32)
    # with a floor, below it nothing more is probed
    found, probes = drive(most_traffic(limit >= 1.0, guess, tol, floor=0.5), lambda s: s <= limit)
    assert min(probes) >= 0.5 and (found == 0.0) == (limit < 0.5)


def linear_grid(fixed_ms: float, per_token_ms: float, per_kv_ms: float = 0.0) -> StepTimeGrid:
    b = np.array([1.0, 1e5])
    k = np.array([0.0, 1e6])
    ms = fixed_ms + per_token_ms * b[None, :] + per_kv_ms * k[:, None]
    return StepTimeGrid(b_axis=b, k_axis=k, ms=ms)


def test_prefill_pool_batches_prompts_fifo_and_times_them_by_the_table():
    env = simpy.Environment()
    done = {}
    pool = PrefillPool(env, 1, linear_grid(2.0, 0.01, 0.001), max_batch_tokens=4000,
                       on_done=lambda rid: done.setdefault(rid, env.now))
    for rid in range(6):  # 6 x 1000 tokens at t=0: forwards of 4000 then 2000 tokens
        pool.submit(rid, 1000)
    env.run()
    first = (2.0 + 0.01 * 4000) * 1e-3
    second = first + (2.0 + 0.01 * 2000) * 1e-3
    assert [done[r] for r in range(4)] == pytest.approx([first] * 4)
    assert [done[4], done[5]] == pytest.approx([second] * 2)
    assert pool.forwards == 2


def test_a_long_prompt_is_chunked_and_its_second_chunk_reads_the_first():
    env = simpy.Environment()
    done = {}
    pool = PrefillPool(env, 1, linear_grid(1.0, 0.01, 0.001), 4000, lambda rid: done.setdefault(rid, env.now))
    pool.submit(0, 5000)
    env.run()
    expect = (1.0 + 0.01 * 4000) + (1.0 + 0.01 * 1000 + 0.001 * 4000)
    assert done[0] == pytest.approx(expect * 1e-3)


def test_prompts_go_to_the_replica_with_the_least_outstanding_tokens():
    env = simpy.Environment()
    done = {}
    pool = PrefillPool(env, 2, linear_grid(1.0, 0.01), 4000, lambda rid: done.setdefault(rid, env.now))
    for rid, n in enumerate([3000, 1000, 1000, 1000]):
        pool.submit(rid, n)
    env.run()
    # replica 0 takes 3000, replica 1 takes the next three (1000, 2000, 3000 outstanding < 3000 only twice)
    assert done[0] == pytest.approx((1.0 + 30) * 1e-3)
    assert len({round(done[r], 9) for r in (1, 2)}) == 1


SMALL_PLAN = {
    "systems": ["mtp-1", "dspark"],
    "engine": {"max_running": 32, "max_batch_tokens": 4096},
    "workload": {"prompt": 128, "output": 48},
    "frontier": None,
    "traffic": {"kind": "poisson", "rate": 60.0},
    "sla": {"tps_targets": [100.0], "baseline": "mtp-1"},
    "run": {"duration_s": 6.0, "warmup_s": 1.0, "quick_duration_s": 3.0, "quick_warmup_s": 0.5},
}


def small_plan_scenario(scenario_file, **extra):
    fields = {**SMALL_PLAN, **extra}
    fields = {k: v for k, v in fields.items() if v is not None}
    return scenario_file(**fields)


@pytest.mark.slow
def test_plan_finds_the_fewest_replicas_and_resumes_from_the_store(scenario_file, tmp_path):
    path = small_plan_scenario(scenario_file)
    scn = load_scenario(path)
    target = Target(tps=100.0, attainment=0.9, ttft_p99=1.0, max_gpus=16, rate_tolerance=0.2)
    planner = Planner(scn, tmp_path / "o", target, Backend("local", 2), quick=True)
    doc = planner.run()
    assert planner.runs > 0
    for name, e in doc["systems"].items():
        assert e["status"] == MET, (name, e["search"])
        n = e["replicas"]
        decode = {t["replicas"]: t["met"] for t in e["search"] if t["phase"] == "decode"}
        assert decode[n]
        if n > 1:
            assert decode[n - 1] is False  # one replica fewer fails: the fewest
        assert e["gpus"] == n  # one GPU per replica, prefill colocated
        assert e["attainment"] >= 0.9 and e["ttft_p99"] <= 1.0
        assert e["headroom"] >= 0.0
        assert e["max_rate_per_replica"] == pytest.approx((1 + e["headroom"]) * doc["arrival_rate"] / n)
        assert e["cost_per_mtok"] == pytest.approx(n * 1.0 / (e["throughput_per_gpu"] * n * 3600) * 1e6)
    assert "needs the fewest GPUs" in doc["verdict"] or "tie for the fewest GPUs" in doc["verdict"]

    again = Planner(scn, tmp_path / "o", target, Backend("local", 2), quick=True)
    doc2 = again.run()
    assert again.runs == 0  # every candidate came from the run store
    assert {k: v["gpus"] for k, v in doc2["systems"].items()} == {k: v["gpus"] for k, v in doc["systems"].items()}


@pytest.mark.slow
def test_plan_reports_unmet_at_max_gpus(scenario_file, tmp_path):
    path = small_plan_scenario(scenario_file, traffic={"kind": "poisson", "rate": 400.0})
    target = Target(tps=100.0, attainment=0.9, ttft_p99=1.0, max_gpus=2, rate_tolerance=0.2)
    doc = Planner(load_scenario(path), tmp_path / "o", target, Backend("local", 1), quick=True).run()
    for e in doc["systems"].values():
        assert e["status"] == UNMET and e["gpus"] == 2
        assert e["headroom"] < 0  # it sustains less than the scenario's traffic
        # why, in the words of its run at the size it ended on
        last = [t for t in e["search"] if t["phase"] == "decode" and t["replicas"] == 2][-1]
        assert e["why_unmet"] == f"at 2 decode GPUs: {last['why_not']}"
    assert doc["verdict"].startswith("No system meets")
    assert unmet_lines(doc) == [f"! {k} unmet: {e['why_unmet']}" for k, e in doc["systems"].items()]


def test_an_unmet_system_is_measured_down_to_half_its_traffic_not_further(scenario_file, tmp_path):
    """Four times the traffic one replica can carry: even half fails, so the shortfall is "below -50%"
    (headroom_hi) with no probe under half the traffic, where the search used to halve down to 1/64."""
    path = small_plan_scenario(scenario_file, systems=["mtp-1"], traffic={"kind": "poisson", "rate": 800.0})
    target = Target(tps=100.0, attainment=0.9, ttft_p99=1.0, max_gpus=1, rate_tolerance=0.2)
    doc = Planner(load_scenario(path), tmp_path / "o", target, Backend("local", 1), quick=True).run()
    e = doc["systems"]["mtp-1"]
    head = [t for t in e["search"] if t["phase"] == "headroom"]
    assert e["status"] == UNMET and [t["traffic_scale"] for t in head] == [0.5] and not head[0]["met"]
    assert math.isnan(e["headroom"]) and math.isnan(e["max_rate_per_replica"]) and e["headroom_hi"] == -0.5
    assert unmet_lines(doc) == [f"! {k} unmet: {e['why_unmet']}" for k, e in doc["systems"].items()]


@pytest.mark.slow
def test_disaggregated_plan_sizes_a_prefill_pool_against_the_ttft_limit(scenario_file, tmp_path):
    path = small_plan_scenario(scenario_file, engine={"max_running": 32, "max_batch_tokens": 4096,
                                                      "prefill": "disaggregated"},
                               workload={"prompt": 3000, "output": 48}, traffic={"kind": "poisson", "rate": 40.0})
    target = Target(tps=100.0, attainment=0.9, ttft_p99=0.3, max_gpus=32, rate_tolerance=0.3)
    doc = Planner(load_scenario(path), tmp_path / "o", target, Backend("local", 2), quick=True).run()
    pre = doc["prefill"]
    # 40 prompts/s x 3000 tokens at ~25 us/token is ~3 GPU-seconds per second: one replica cannot keep up
    assert pre["replicas"] >= 3
    fails = [t for t in pre["search"] if not t["met"]]
    assert any(t["prefill_replicas"] == pre["replicas"] - 1 for t in fails)
    for e in doc["systems"].values():
        assert e["prefill_gpus"] == pre["replicas"] and e["gpus"] == e["prefill_gpus"] + e["decode_gpus"]
        assert e["ttft_p99"] <= 0.3
        # tok/s per GPU of the whole deployment and the cost share one basis: every GPU
        deployed = e["throughput_per_gpu"] * e["decode_gpus"] / e["gpus"]
        assert e["throughput_per_deployed_gpu"] == pytest.approx(deployed)
        assert e["cost_per_mtok"] == pytest.approx(1.0 / (deployed * 3600) * 1e6)
    assert "prefill +" in doc["verdict"]
    table = format_plan(doc)
    assert {"prefill GPUs", "decode GPUs", "TTFT p99 (s)", "$/M output tok", "tok/s/GPU (all)"} <= set(table.columns)


def test_verdict_names_the_fewest_gpus_and_the_saving_over_the_baseline():
    def entry(name, gpus, status=MET, headroom=0.1):
        return {"system": name, "gpus": gpus, "decode_gpus": gpus, "prefill_gpus": 0, "status": status,
                "cost_per_mtok": 0.5, "attainment": 0.99, "headroom": headroom}

    doc = {"target": {"tps_per_user": 80, "attainment": 0.99, "ttft_p99_s": 1.0, "max_gpus": 64,
                      "gpu_hour_cost_usd": 2.5},
           "arrival_rate": 60.0, "baseline": "mtp-1",
           "systems": {"mtp-1": entry("mtp-1", 8), "static-3": entry("static-3", 6, headroom=0.05),
                       "dspark": entry("dspark", 6, headroom=0.3)}}
    text = verdict(doc)
    assert text.startswith("At 60.0 requests/s")
    assert "dspark needs the fewest GPUs: 6, with +30% headroom" in text
    assert "1 other system needs as many, with less headroom" in text
    assert "2 GPUs (25%) fewer than mtp-1's 8" in text
    doc["systems"]["mtp-1"] = entry("mtp-1", 6, headroom=0.02)
    assert "the baseline mtp-1 needs as many, with +2% headroom" in verdict(doc)
    doc["systems"]["mtp-1"] = entry("mtp-1", 64, status=UNMET)
    assert "the baseline mtp-1 does not meet it within 64 GPUs" in verdict(doc)


@pytest.mark.slow
def test_cli_plan_prints_the_table_and_verdict_and_the_report_shows_it(scenario_file, tmp_path):
    from click.testing import CliRunner

    from simulator.cli import cli

    path = small_plan_scenario(scenario_file, systems=["mtp-1"])
    out = tmp_path / "o"
    res = CliRunner().invoke(cli, ["plan", str(path), "--quick", "--out", str(out), "--jobs", "1",
                                   "--attainment", "0.9", "--max-gpus", "8", "--rate-tolerance", "0.2",
                                   "--gpu-hour-cost", "3"])
    assert res.exit_code == 0, res.output
    assert "GPUs" in res.output and "the fewest GPUs" in res.output
    plan = pd.read_csv(out / "plan.csv")
    assert list(plan["system"]) == ["mtp-1"]
    assert {"gpus", "replicas", "max_rate_per_replica", "attainment", "ttft_p99", "cost_per_mtok", "status"} <= set(plan)
    doc = json.loads((out / "plan.json").read_text())
    assert doc["target"]["gpu_hour_cost_usd"] == 3 and doc["quick"] is True
    page = (out / "report.html").read_text()
    assert "GPUs needed at the SLA" in page and html.escape(doc["verdict"]) in page

    # the sweep of the same scenario then carries the plan in its report
    res = CliRunner().invoke(cli, [str(path), "--quick", "--out", str(out), "--jobs", "1"])
    assert res.exit_code == 0, res.output
    assert "GPUs needed at the SLA" in (out / "report.html").read_text()
    res = CliRunner().invoke(cli, [str(path), "--out", str(out), "--jobs", "1"])  # not --quick: not that plan
    assert res.exit_code == 0, res.output
    assert "GPUs needed at the SLA" not in (out / "report.html").read_text()


@pytest.mark.slow
def test_plan_needs_open_loop_traffic(scenario_file, tmp_path):
    path = scenario_file()  # closed loop only
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "plan", str(path), "--out", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "traffic" in proc.stderr and "Traceback" not in proc.stderr


def test_a_finite_prefill_pool_keeps_the_engine_invariants_and_queues_prompts(scenario_file):
    from tests.simulator.engine_helpers import simulate

    # 40 prompts/s of 3000 tokens need ~3 prefill replicas on the H200 table
    path = scenario_file(systems=["mtp-1", "dspark"], frontier=None, traffic={"kind": "poisson", "rate": 40.0},
                         workload={"prompt": 3000, "output": 48},
                         engine={"max_running": 64, "max_batch_tokens": 4096, "prefill": "disaggregated"})
    unbounded, _ = simulate(path, 1, concurrency=None, quick=True)
    ample, sim = simulate(path, 1, concurrency=None, quick=True, sets=("hardware.prefill_replicas=8",))
    scarce, sim1 = simulate(path, 1, concurrency=None, quick=True, sets=("hardware.prefill_replicas=1",))
    assert sim.prefill_pool.forwards > 0 and not ample["prefill_saturated"]
    # batching prompts costs a little over an idle pool's one forward per prompt; one replica falls behind
    assert unbounded["ttft_p99"] <= ample["ttft_p99"] < 0.5
    assert scarce["prefill_saturated"] and scarce["saturated"]
    req = sim1.requests.frame()
    assert np.nanmax(req["first_token"] - req["arrival"]) > 5 * ample["ttft_p99"]  # prompts queue
    assert sim1.prefill_pool.busy_s == pytest.approx(sim1.env.now, rel=0.05)  # the one replica never rests


@pytest.mark.slow
def test_plan_options_get_their_own_folder_and_the_terminal_table_fits(scenario_file, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from simulator.cli import cli, default_out

    path = small_plan_scenario(scenario_file, systems=["mtp-1"])
    assert default_out(path, (), ("plan.attainment=0.9",)) != default_out(path, (), ("plan.attainment=0.95",))
    assert default_out(path, (), ("plan.attainment=0.9",)).name.startswith(f"{path.stem}-plan-")
    monkeypatch.chdir(tmp_path)
    common = ["plan", str(path), "--quick", "--jobs", "1", "--max-gpus", "8", "--rate-tolerance", "0.3"]
    res_a = CliRunner().invoke(cli, [*common, "--attainment", "0.9"])
    res_b = CliRunner().invoke(cli, [*common, "--attainment", "0.8"])
    assert res_a.exit_code == 0 and res_b.exit_code == 0, res_a.output + res_b.output
    folders = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert len(folders) == 2 and all(f.startswith(f"{path.stem}-plan-") for f in folders)
    targets = {json.loads((tmp_path / "results" / f / "plan.json").read_text())["target"]["attainment"]
               for f in folders}
    assert targets == {0.9, 0.8}  # neither overwrote the other
    table = res_a.output.split("\n\n")[0]
    assert max(len(line) for line in table.splitlines()) <= 120 and "req/s/replica" in table
    page = next((tmp_path / "results").glob("*/report.html")).read_text()
    assert "seed(s) per point" not in page  # a capacity section alone ran no sweep
    # an override shows in the title and as what it changed from the file the description was written for
    rate = yaml.safe_load(path.read_text())["traffic"]["rate"]
    res_c = CliRunner().invoke(cli, [*common, "--set", f"traffic.rate={rate * 0.5:g}"])
    assert res_c.exit_code == 0, res_c.output
    page = next(f for f in (tmp_path / "results").glob("*/report.html") if f.parent.name not in folders).read_text()
    assert f"report: {path.stem} with 1 override</h1>" in page
    assert f"traffic.rate: {rate!r} in the file, {rate * 0.5:g} here" in page


@pytest.mark.slow
def test_a_zero_traffic_rate_is_refused_in_one_line(scenario_file, tmp_path):
    path = small_plan_scenario(scenario_file, traffic={"kind": "poisson", "rate": 0.0})
    proc = subprocess.run([sys.executable, "-m", "simulator.cli", "plan", str(path), "--out", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"error: {path}: traffic.rate: Input should be greater than 0 (got 0.0)"


DISAGG = {"engine": {"max_running": 32, "max_batch_tokens": 4096, "prefill": "disaggregated"},
          "workload": {"prompt": 3000, "output": 48}, "traffic": {"kind": "poisson", "rate": 40.0}}


@pytest.mark.slow
def test_headroom_is_measured_with_the_planned_prefill_pool_and_its_bound_meets(scenario_file, tmp_path):
    path = small_plan_scenario(scenario_file, systems=["mtp-1"], **DISAGG)
    target = Target(tps=100.0, attainment=0.9, ttft_p99=0.3, max_gpus=32, rate_tolerance=0.3)
    doc = Planner(load_scenario(path), tmp_path / "o", target, Backend("local", 2), quick=True).run()
    pre = doc["prefill"]["replicas"]
    e = doc["systems"]["mtp-1"]
    head = [t for t in e["search"] if t["phase"] == "headroom"]
    assert head and all(t["prefill_replicas"] == pre for t in head)
    # the stated headroom is a lower bound the whole deployment was seen to meet, and the next probe up failed
    with_pool = [t for t in e["search"] if t["prefill_replicas"] == pre]  # scale 1 is the with-prefill run
    at_bound = [t for t in with_pool if t["traffic_scale"] == pytest.approx(1 + e["headroom"], abs=1e-6)]
    assert at_bound and all(t["met"] for t in at_bound)
    assert any(not t["met"] and t["traffic_scale"] > 1 + e["headroom"] for t in head)


@pytest.mark.slow
def test_the_pools_grow_jointly_never_decode_against_a_prefill_shortfall(scenario_file, tmp_path):
    """Confirmed with too small a prefill pool (one replica for ~3 replicas' prompts), the plan adds prefill
    replicas while the shortfall is the prefill pool's, and no decode replica."""
    from simulator.runs.plan import SystemPlan

    path = small_plan_scenario(scenario_file, systems=["mtp-1"], **DISAGG)
    target = Target(tps=100.0, attainment=0.9, ttft_p99=0.3, max_gpus=32, rate_tolerance=0.3)
    planner = Planner(load_scenario(path), tmp_path / "o", target, Backend("local", 2), quick=True)
    plan = SystemPlan(planner.systems[0], replicas=1, met=True)
    planner.drive({"mtp-1": planner.with_prefill(plan, 1)})
    confirm = [t for t in plan.trials if t.phase == "with-prefill"]
    assert confirm[0].why_not == "saturated (prefill pool)"
    assert [t.prefill_replicas for t in confirm] == list(range(1, len(confirm) + 1))
    assert all(t.replicas == 1 for t in confirm)  # no decode replica against the prefill pool's shortfall
    assert all(prefill_bound(t.why_not) for t in confirm[:-1]) and confirm[-1].why_not is None
    assert plan.met and plan.replicas == 1 and plan.prefill == len(confirm) >= 3
    row = planner.row_of(plan, 1)
    assert row["prefill_replicas"] == plan.prefill and row["gpus"] == 1 + plan.prefill and row["why_unmet"] is None


def test_systems_level_on_gpus_and_headroom_tie_instead_of_a_noise_picked_winner():
    def entry(name, gpus, headroom, cost):
        return {"system": name, "gpus": gpus, "decode_gpus": gpus - 2, "prefill_gpus": 2, "status": MET,
                "cost_per_mtok": cost, "attainment": 1.0, "headroom": headroom}

    doc = {"target": {"tps_per_user": 200, "attainment": 0.99, "ttft_p99_s": 1.0, "max_gpus": 64,
                      "gpu_hour_cost_usd": 1.0, "rate_tolerance": 0.05},
           "traffic": {"kind": "poisson", "rate": 55.0}, "arrival_rate": 57.4, "baseline": "mtp-1",
           "systems": {"mtp-1": entry("mtp-1", 5, 0.39, 0.052), "threshold-0.7": entry("threshold-0.7", 4, 0.0, 0.041),
                       "dspark": entry("dspark", 4, 0.48, 0.041), "goodput-k": entry("goodput-k", 4, 0.48, 0.040)}}
    text = verdict(doc)
    assert text.startswith("At 55.0 requests/s (57.4 realised in the measured window")
    assert "dspark and goodput-k tie for the fewest GPUs: 4 (2 prefill + 2 decode), with +48% headroom" in text
    assert "$0.040-$0.041" in text
    assert "1 other system needs as many, with less headroom" in text  # threshold-0.7, +0%
    assert "1 GPU (20%) fewer than mtp-1's 5" in text


def test_a_met_system_names_what_limits_it_first_as_its_traffic_grows(scenario_file, tmp_path):
    """The knee: at the size a plan chose, the least traffic multiplier that failed names the constraint that
    binds (per-user speed here: a TTFT limit no run nears), in plan.json, plan.csv's binds and one terminal line."""
    path = small_plan_scenario(scenario_file, systems=["mtp-1"])
    target = Target(tps=100.0, attainment=0.9, ttft_p99=30.0, max_gpus=16, rate_tolerance=0.2)
    doc = Planner(load_scenario(path), tmp_path / "o", target, Backend("local", 1), quick=True).run()
    e = doc["systems"]["mtp-1"]
    assert e["status"] == MET
    fails = [t for t in e["search"] if t["phase"] == "headroom" and t["replicas"] == e["replicas"] and not t["met"]]
    first = min(fails, key=lambda t: t["traffic_scale"])
    assert e["binds"].startswith(("per-user speed", "throughput"))
    assert e["binds"].split(" at ")[-1] == f"{first['traffic_scale'] - 1:+.0%} traffic"
    assert e["binds_why"] == first["why_not"] and "TTFT" not in e["binds_why"]
    assert first["traffic_scale"] - 1 > e["headroom"]  # beyond the headroom the plan reports
    (line,) = binds_line(doc)
    assert line == f"first limit as traffic grows (plan.csv binds, binds_why): mtp-1 {e['binds']}"
    csv, _ = write_plan(tmp_path / "o", doc)
    assert pd.read_csv(csv).loc[0, ["binds", "binds_why"]].tolist() == [e["binds"], e["binds_why"]]
    assert f"<li>mtp-1: {html.escape(e['binds'])} ({html.escape(e['binds_why'])})</li>" in notes_html(doc)

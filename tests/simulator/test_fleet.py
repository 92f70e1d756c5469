"""Fleet plans (simulate plan --probe-replicas): the probe-to-fleet arithmetic in closed form, a small real fleet
plan whose full-size confirmation runs at the derived size, and bad input in one line."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.errors import UserError
from simulator.inputs.config import load_scenario
from simulator.runs.backends import Backend
from simulator.runs.fleet import FLEET_COLUMNS, FleetPlanner, replicas_needed, within
from simulator.runs.plan import MET, PLAN_COLUMNS, Target
from tests.simulator.test_plan import small_plan_scenario


@given(probe=st.integers(1, 16), needed=st.integers(1, 2000), slack=st.floats(0.0, 0.999))
def test_replicas_needed_is_the_fewest_whose_load_per_replica_the_probe_met(probe, needed, slack):
    # a probe of `probe` replicas met a share of the traffic that puts the whole on between needed - 1 (excluded)
    # and needed replicas at the probe's load each: the closed form is ceil(probe / share) = needed
    share = probe / (needed - slack)
    n = replicas_needed(probe, share)
    assert n == math.ceil(round(probe / share, 9))
    assert n == needed
    assert 1 / n <= share / probe * (1 + 1e-9)  # each of n carries at most what a probe replica met
    assert n == 1 or 1 / (n - 1) > share / probe  # one fewer would carry more


def test_replicas_needed_known_values_and_guard():
    assert replicas_needed(4, 0.01) == 400  # 4 / 0.01 is 400.00000000000006 in floating point
    assert replicas_needed(4, 4 / 403) == 403
    assert replicas_needed(1, 0.3) == 4
    assert replicas_needed(8, 8 / 1000.5) == 1001
    with pytest.raises(ValueError):
        replicas_needed(4, 0.0)
    assert within(0.985, 0.99, 1.0, 0.0) is False
    assert within(0.985, 0.99, 1.0, 0.005) is True
    assert within(1.0, 1.0, 1.0, 0.0) is True


FLEET = {"systems": ["mtp-1"], "traffic": {"kind": "poisson", "rate": 700.0}}


@pytest.mark.slow
def test_a_small_fleet_plan_confirms_the_derived_size_at_full_traffic(scenario_file, tmp_path):
    from click.testing import CliRunner

    from simulator.cli import cli

    path = small_plan_scenario(scenario_file, **FLEET)
    out = tmp_path / "o"
    res = CliRunner().invoke(cli, ["plan", str(path), "--quick", "--out", str(out), "--jobs", "2",
                                   "--probe-replicas", "1", "--replicates", "2", "--attainment", "0.9",
                                   "--max-gpus", "8", "--rate-tolerance", "0.2"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "plan.json").read_text())
    e, f = doc["systems"]["mtp-1"], doc["fleet"]["systems"]["mtp-1"]
    # the size is derived from the probe's capacity, larger than the probe (one replica)
    n = replicas_needed(1, f["probe_share_lo"])
    assert e["replicas"] == n == e["decode_gpus"] == e["gpus"] and n > 1
    probes = [t for t in e["search"] if t["phase"] == "probe"]
    assert probes and all(t["replicas"] == 1 for t in probes)
    assert any(t["met"] and t["traffic_scale"] == pytest.approx(f["probe_share_lo"]) for t in probes)
    # the prediction: the probe at the full size's load per replica, over both seeds
    pred = [t for t in e["search"] if t["phase"] == "predict"]
    assert len(pred) == 1 and pred[0]["replicas"] == 1 and pred[0]["traffic_scale"] == pytest.approx(1 / n)
    # the confirmation: a real run of n replicas at the scenario's own traffic, one seed
    conf = [t for t in e["search"] if t["phase"] == "confirm"]
    assert len(conf) == 1 and conf[0]["replicas"] == n and conf[0]["traffic_scale"] == 1.0
    assert conf[0]["arrival_rate"] == pytest.approx(700.0, rel=0.1)
    assert f["confirmation"]["requests"] > 2 * pred[0]["arrival_rate"]  # n times the probe's traffic
    assert e["attainment"] == f["confirmation"]["attainment"] == conf[0]["attainment"]
    assert (e["attainment_lo"], e["attainment_hi"]) == (pred[0]["attainment_lo"], pred[0]["attainment_hi"])
    res_ = f["predicted"]["resolution"]
    assert e["confirm_within"] == within(e["attainment"], e["attainment_lo"], e["attainment_hi"], res_)
    assert e["confirmed"] == conf[0]["met"] and (e["status"] == MET) == conf[0]["met"]
    # headroom from the probe's capacity at the derived size
    assert e["headroom"] == pytest.approx(f["probe_share_lo"] * n - 1)
    assert "probed on 1 replica(s); confirmed at full size for 1 system(s)" in doc["verdict"]
    assert "full-size confirmations:" in res.output and "mtp-1: probe" in res.output
    plan = pd.read_csv(out / "plan.csv")
    assert list(plan.columns) == PLAN_COLUMNS + FLEET_COLUMNS
    assert plan.loc[0, "probe_replicas"] == 1 and plan.loc[0, "decode_gpus"] == n


@pytest.mark.slow
def test_a_disaggregated_fleet_plan_derives_the_prefill_pool_from_its_probe(scenario_file, tmp_path):
    path = small_plan_scenario(scenario_file, systems=["mtp-1"], traffic={"kind": "poisson", "rate": 300.0},
                               engine={"max_running": 32, "max_batch_tokens": 4096, "prefill": "disaggregated"},
                               workload={"prompt": 3000, "output": 48})
    target = Target(tps=100.0, attainment=0.9, ttft_p99=0.3, max_gpus=64, rate_tolerance=0.3)
    planner = FleetPlanner(load_scenario(path), tmp_path / "o", target, Backend("local", 2), 1, quick=True)
    doc = planner.run()
    pre, e = doc["fleet"]["prefill"], doc["systems"]["mtp-1"]
    assert pre["replicas"] == replicas_needed(1, pre["probe_share_lo"]) == doc["prefill"]["replicas"] > 1
    probes = doc["prefill"]["search"]
    assert probes and all(t["prefill_replicas"] == 1 and t["phase"] == "prefill-probe" for t in probes)
    assert e["prefill_gpus"] == pre["replicas"] and e["gpus"] == e["prefill_gpus"] + e["decode_gpus"]
    conf = [t for t in e["search"] if t["phase"] == "confirm"]
    assert len(conf) == 1 and conf[0]["prefill_replicas"] == pre["replicas"] and conf[0]["replicas"] == e["replicas"]


def test_a_probe_larger_than_the_cap_is_refused_in_one_line(scenario_file, tmp_path):
    scn = load_scenario(small_plan_scenario(scenario_file, **FLEET))
    target = Target(tps=100.0, attainment=0.9, max_gpus=8)
    with pytest.raises(UserError) as exc:
        FleetPlanner(scn, tmp_path / "o", target, Backend("local", 1), 9, quick=True)
    assert str(exc.value) == ("--probe-replicas 9: the probe needs 9 GPUs, more than --max-gpus 8; a fleet plan "
                              "probes a few replicas of a larger deployment")
    assert not (tmp_path / "o").exists()  # refused before any run


def test_a_probe_as_large_as_the_answer_is_refused_in_one_line(scenario_file, tmp_path):
    scn = load_scenario(small_plan_scenario(scenario_file, **{**FLEET, "traffic": {"kind": "poisson", "rate": 60.0}}))
    target = Target(tps=100.0, attainment=0.9, max_gpus=2, rate_tolerance=0.5)
    with pytest.raises(UserError) as exc:
        FleetPlanner(scn, tmp_path / "o", target, Backend("local", 2), 1, quick=True).run()
    assert str(exc.value) == ("--probe-replicas 1: mtp-1 serves the whole traffic on 1 decode replica(s), no more "
                              "than the probe; a fleet plan is for traffic larger than its probe (probe fewer "
                              "replicas, or plan without --probe-replicas)")


def test_a_fleet_over_max_gpus_is_unmet_and_not_run_at_full_size(scenario_file, tmp_path):
    scn = load_scenario(small_plan_scenario(scenario_file, **FLEET))  # 700 requests/s: ~5 replicas
    target = Target(tps=100.0, attainment=0.9, max_gpus=3, rate_tolerance=0.3)
    doc = FleetPlanner(scn, tmp_path / "o", target, Backend("local", 2), 1, quick=True).run()
    e, f = doc["systems"]["mtp-1"], doc["fleet"]["systems"]["mtp-1"]
    n = replicas_needed(1, f["probe_share_lo"])
    assert n > 3 and e["status"] == "unmet_at_max_gpus" and e["gpus"] == n
    assert e["why_unmet"] == f"the probe puts it at {n} decode GPUs, above --max-gpus 3"
    assert not any(t["phase"] == "confirm" for t in e["search"]) and f["confirmation"] is None
    assert e["confirmed"] is None
    # the probe at the full size's load stands in, its rate taken back to the whole traffic's
    assert doc["arrival_rate"] == pytest.approx(700.0, rel=0.1)
    assert "no system was confirmed at full size" in doc["verdict"]

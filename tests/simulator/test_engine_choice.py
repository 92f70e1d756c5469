"""Which policy the engine should run, per load segment: the plan's fewest-GPU system (or "turn speculation off"),
its margin over the runner-up and over no speculation, and whether each margin exceeds the run-to-run noise the
plan's seeds measured."""

from __future__ import annotations

import html
import json

import pandas as pd
import pytest
import yaml

from simulator.inputs.config import load_scenario
from simulator.outputs.verdicts import (
    MET,
    MET_AT_HIGHER_RATE,
    UNMET,
    UNRESOLVED_STATUS,
    engine_lines,
    plan_engine,
)
from simulator.runs.backends import Backend
from simulator.runs.day_plan import DayPlanner, RatePlan
from simulator.runs.plan import Planner, SystemPlan, Target, Trial, plan_table, speculates
from simulator.runs.replicates import combine
from tests.conftest import BASE, merge
from tests.simulator.test_day_plan import SMALL_DAY, TARGET
from tests.simulator.test_plan import small_plan_scenario

SMALL_TARGET = Target(tps=100.0, attainment=0.9, ttft_p99=1.0, max_gpus=16, rate_tolerance=0.2)


@pytest.mark.slow
def test_a_plans_engine_choice_is_its_fewest_gpus_and_its_noise_flag_its_seeds_bounds(scenario_file, tmp_path):
    # 300 requests/s: plain decoding needs a GPU more than the drafters here, and two seeds judge the margin
    path = small_plan_scenario(scenario_file, systems=["ar", "mtp-1", "dspark"],
                               traffic={"kind": "poisson", "rate": 300.0})
    doc = Planner(load_scenario(path), tmp_path / "o", SMALL_TARGET, Backend("local", 2), quick=True,
                  replicates=2).run()
    (e,) = doc["engine"]
    systems = doc["systems"]
    assert doc["no_speculation"] == ["ar"]
    fewest = min(s["gpus"] for s in systems.values() if s["status"] == MET)
    assert e["policy"] in systems and e["gpus"] == systems[e["policy"]]["gpus"] == fewest
    assert e["speculation"] is (e["policy"] != "ar") and e["seeds"] == 2
    # the runner-up is the other system with the fewest GPUs left, its margin the difference
    others = [s for s in systems.values() if s["system"] != e["policy"]]
    assert systems[e["runner_up"]]["gpus"] == min(s["gpus"] for s in others)
    assert e["margin_gpus"] == systems[e["runner_up"]]["gpus"] - e["gpus"]
    ar = systems["ar"]
    assert ar["gpus"] > e["gpus"]  # speculation saves GPUs at this load
    assert e["no_speculation"] == "ar" and e["no_speculation_margin_gpus"] == ar["gpus"] - e["gpus"]
    # beyond noise exactly when plain decoding clearly fails (over both seeds) with the chosen GPU count
    assert e["no_speculation_beyond_noise"] is (e["gpus"] < ar["gpus_lo"])
    word = "beyond" if e["no_speculation_beyond_noise"] else "within"
    assert f"against no speculation: {ar['gpus'] - e['gpus']} GPU" in e["line"]
    assert f"{word} run-to-run noise (2 seeds)" in e["line"]
    # the verdict names the same system (alone, or among those tied for the fewest GPUs)
    assert e["policy"] in doc["verdict"].split(" the fewest GPUs")[0]
    table = plan_table(doc)
    assert list(table.loc[table["engine_pick"], "system"]) == [e["policy"]]


def seeds_rows(attainments: list[float]) -> dict:
    rows = [{"sla_attainment": a, "ttft_p99": 0.2, "saturated": False, "steps": 100, "requests": 300,
             "unfinished": 0, "seed": s, "throughput_per_gpu": 1000.0, "tps_per_user_p10": 150.0,
             "arrival_rate": 60.0} for s, a in enumerate(attainments)]
    return combine(rows)


def sized(planner: Planner, name: str, counts: dict[int, list[float]], answer: int) -> SystemPlan:
    """A system's decode search as the plan records it: per replica count the attainment of each seed, judged by
    the plan's own rule over the seeds; the headroom search at the answer met +20% and failed +44%."""
    spec = next(s for s in planner.systems if s.name == name)
    plan = SystemPlan(spec)
    judged = planner._judge(True)
    for n, atts in counts.items():
        row = seeds_rows(atts)
        plan.trials.append(Trial("decode", n, 1.0, None, row, judged(row)))
    meets = seeds_rows([1.0] * len(counts[answer]))
    plan.trials += [Trial("headroom", answer, 1.2, None, meets, None),
                    Trial("headroom", answer, 1.44, None, seeds_rows([0.5] * len(counts[answer])), "attainment")]
    plan.replicas, plan.met, plan.final, plan.max_scale = answer, True, meets, 1.2
    return plan


@pytest.mark.parametrize(("two_replicas", "beyond"), [
    ([0.5, 0.6, 0.55], True),      # every seed fails clearly at 2 replicas: the margin is real
    ([0.95, 0.85, 0.93], False),   # the seeds straddle the 90% target at 2: ar might need as few
])
def test_the_noise_flag_follows_the_replicate_spread(scenario_file, tmp_path, two_replicas, beyond):
    path = small_plan_scenario(scenario_file, systems=["ar", "dspark"],
                               sla={"tps_targets": [100.0], "baseline": "ar"})
    planner = Planner(load_scenario(path), tmp_path / "o", SMALL_TARGET, Backend("local", 1), quick=True,
                      replicates=3)
    plans = {"ar": sized(planner, "ar", {1: [0.2, 0.3, 0.25], 2: two_replicas, 3: [1.0, 1.0, 1.0]}, 3),
             "dspark": sized(planner, "dspark", {1: [0.4, 0.5, 0.45], 2: [1.0, 1.0, 1.0]}, 2)}
    doc = planner.document(plans, None, None)
    ar = doc["systems"]["ar"]
    assert (ar["gpus"], ar["gpus_lo"]) == (3, 3 if beyond else 2)
    (e,) = doc["engine"]
    assert (e["policy"], e["gpus"], e["runner_up"], e["margin_gpus"]) == ("dspark", 2, "ar", 1)
    assert e["margin_beyond_noise"] is beyond and e["no_speculation_beyond_noise"] is beyond
    assert e["line"].endswith(f"{'beyond' if beyond else 'within'} run-to-run noise (3 seeds)")
    assert "dspark needs the fewest GPUs: 2" in doc["verdict"]

    # one seed measures no noise: the flag is unknown, not a guess
    one = {**doc, "seeds": [0]}
    assert plan_engine(one)["margin_beyond_noise"] is None
    assert "noise not measured (one seed" in plan_engine(one)["line"]


def entry(name: str, gpus: int, status: str = MET, headroom: float = 0.1, headroom_hi: float = 0.2,
          gpus_lo: int | None = None) -> dict:
    return {"system": name, "gpus": gpus, "decode_gpus": gpus, "prefill_gpus": 0, "status": status,
            "cost_per_mtok": 0.5, "attainment": 0.99, "headroom": headroom, "headroom_hi": headroom_hi,
            "gpus_lo": gpus if gpus_lo is None else gpus_lo}


def doc_of(*entries: dict, no_speculation=("ar",), seeds=(0, 1, 2)) -> dict:
    return {"target": {"tps_per_user": 80, "attainment": 0.99, "ttft_p99_s": 1.0, "max_gpus": 64,
                       "gpu_hour_cost_usd": 1.0, "rate_tolerance": 0.05},
            "arrival_rate": 60.0, "baseline": None, "seeds": list(seeds), "no_speculation": list(no_speculation),
            "systems": {e["system"]: e for e in entries}}


def test_where_no_speculating_policy_wins_the_engine_turns_speculation_off():
    e = plan_engine(doc_of(entry("ar", 4), entry("dspark", 5, gpus_lo=5), entry("static-3", 6)))
    assert (e["policy"], e["speculation"], e["no_speculation"]) == ("ar", False, "ar")
    assert e["line"] == ("turn speculation off (ar, 4 GPUs); against the best speculating policy: 1 GPU fewer "
                         "than dspark's 5, beyond run-to-run noise (3 seeds)")


def test_equal_gpus_are_told_apart_by_headroom_only_where_the_seeds_clearly_separate_it():
    # dspark's bound +30% is above ar's whole interval (+10..+20%): ar clearly fails at traffic dspark meets
    e = plan_engine(doc_of(entry("ar", 4), entry("dspark", 4, headroom=0.3, headroom_hi=0.5)))
    assert (e["policy"], e["margin_gpus"], e["no_speculation_beyond_noise"]) == ("dspark", 0, True)
    assert "as many GPUs as ar, headroom +30% against +10%, beyond run-to-run noise" in e["line"]
    # ar's interval reaches dspark's bound: a tie, a margin of nothing
    e = plan_engine(doc_of(entry("ar", 4, headroom_hi=0.4), entry("dspark", 4, headroom=0.3, headroom_hi=0.5)))
    assert e["tied_with"] == ["ar"] and e["no_speculation_beyond_noise"] is False
    assert e["line"].endswith("against no speculation: as many GPUs as ar, not told apart")


def test_an_unmet_or_unresolved_rival_and_a_plan_without_a_no_speculation_arm():
    e = plan_engine(doc_of(entry("dspark", 4), entry("mtp-1", 64, status=UNMET), no_speculation=()))
    assert (e["runner_up"], e["margin_gpus"], e["margin_beyond_noise"]) == ("mtp-1", None, True)
    assert e["no_speculation"] is None
    assert e["line"] == ("run dspark (4 GPUs); against the runner-up: mtp-1 does not meet the SLA within 64 GPUs, "
                         "beyond run-to-run noise (3 seeds); no-speculation not compared (add it: --set systems+=ar)")
    e = plan_engine(doc_of(entry("dspark", 4), entry("ar", 64, status=UNRESOLVED_STATUS)))
    assert e["no_speculation_beyond_noise"] is False and "ar cannot be resolved within 64 GPUs, within" in e["line"]
    e = plan_engine(doc_of(entry("dspark", 64, status=UNMET), entry("ar", 64, status=UNRESOLVED_STATUS)))
    assert e["policy"] is None and e["line"] == "no policy meets the SLA within 64 GPUs (ar unresolved at 3 seed(s))"


def test_which_systems_speculate(scenario_file, tmp_path):
    path = small_plan_scenario(scenario_file, systems=["ar", "mtp-1", "static-0", "static-3", "dspark"])
    planner = Planner(load_scenario(path), tmp_path / "o", SMALL_TARGET, Backend("local", 1))
    assert {s.name: speculates(s) for s in planner.systems} == {
        "ar": False, "mtp-1": True, "static-0": False, "static-3": True, "dspark": True}


@pytest.fixture(scope="module")
def day_with_ar(tmp_path_factory):
    folder = tmp_path_factory.mktemp("day-engine")
    path = folder / "tide.yaml"
    path.write_text(yaml.safe_dump(merge(BASE, {**SMALL_DAY, "systems": ["ar", "mtp-1", "dspark"]})))
    return path, folder / "o", DayPlanner(load_scenario(path), folder / "o", TARGET, Backend("local", 2),
                                          quick=True).run()


@pytest.mark.slow
def test_a_day_plan_picks_a_policy_per_segment_from_that_segments_gpu_counts(day_with_ar):
    doc = day_with_ar[2]
    rows = pd.DataFrame(doc["rows"])
    assert [e["segment"] for e in doc["engine"]] == [s["segment"] for s in doc["segments"]]
    for e in doc["engine"]:
        mine = rows[rows["segment"] == e["segment"]]
        ok = mine[mine["status"].isin([MET, MET_AT_HIGHER_RATE])]
        assert e["gpus"] == ok["gpus"].min() == int(mine.loc[mine["system"] == e["policy"], "gpus"].iloc[0])
        assert list(mine.loc[mine["engine_pick"], "system"]) == [e["policy"]]
        ar = int(mine.loc[mine["system"] == "ar", "gpus"].iloc[0])
        assert e["no_speculation"] == "ar" or e["policy"] == "ar"
        if e["policy"] != "ar":
            assert e["no_speculation_margin_gpus"] == ar - e["gpus"]
        # one seed: a GPU margin's noise is not measured; a margin of nothing is no margin
        flags = [e["margin_beyond_noise"], e["no_speculation_beyond_noise"]]
        margins = [e["margin_gpus"], e["no_speculation_margin_gpus"]]
        for flag, margin in zip(flags, margins, strict=True):
            if margin is not None and margin > 0:
                assert flag is None
        if e["rate"] != max(s["rate"] for s in doc["segments"]):  # no headroom measured below the peak
            for flag, margin in zip(flags, margins, strict=True):
                assert margin != 0 or flag is False
    # the peak's segment reads the peak's whole plan
    peak = next(e for e in doc["engine"] if e["rate"] == 250.0)
    assert {k: v for k, v in peak.items() if k not in ("segment", "rate")} == {
        k: v for k, v in plan_engine(doc["peak_plan"]).items() if k not in ("segment", "rate")}
    lines = engine_lines(doc)
    assert lines[0] == "Engine policy per segment:" and len(lines) == 1 + len({s["rate"] for s in doc["segments"]})
    assert lines[1].startswith("  00:00, 02:00 (20.0 requests/s): ")


@pytest.mark.slow
def test_a_day_segments_fewest_gpus_not_ruled_out_follow_its_seeds(day_with_ar, tmp_path):
    path = day_with_ar[0]
    day = DayPlanner(load_scenario(path), tmp_path / "o", TARGET, Backend("local", 1), quick=True, replicates=3)
    planner = day.planner
    spec = next(s for s in planner.systems if s.name == "ar")
    judged = planner._judge(True)

    def rate_plan(two: list[float]) -> RatePlan:
        plan = SystemPlan(spec)
        for n, atts in ((3, [1.0] * 3), (2, two), (1, [0.2] * 3)):
            row = seeds_rows(atts)
            plan.trials.append(Trial("decode", n, 1.0, None, row, judged(row)))
        return RatePlan(20.0, decode={"ar": 3}, status={"ar": MET}, plans={"ar": plan})

    assert day._gpus_lo(rate_plan([0.95, 0.85, 0.93]), "ar", {}) == 2  # unresolved at 2: not ruled out
    assert day._gpus_lo(rate_plan([0.5, 0.6, 0.55]), "ar", {}) == 3    # clearly failing at 2


@pytest.mark.slow
def test_cli_prints_the_engine_choice_and_writes_it(day_with_ar, scenario_file, tmp_path):
    from click.testing import CliRunner

    from simulator.cli import cli

    path, out, _ = day_with_ar
    res = CliRunner().invoke(cli, ["plan", str(path), "--per-segment", "--quick", "--out", str(out), "--jobs", "1",
                                   "--attainment", "0.9", "--max-gpus", "16", "--rate-tolerance", "0.2",
                                   "--replicates", "1"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "day_plan.json").read_text())
    for line in engine_lines(doc):
        assert line in res.output
    csv = pd.read_csv(out / "day_plan.csv")
    assert {"engine_pick", "gpus_lo"} <= set(csv) and csv.groupby("segment")["engine_pick"].sum().eq(1).all()
    page = (out / "report.html").read_text()
    assert html.escape(doc["engine"][0]["line"]) in page

    plain = small_plan_scenario(scenario_file, systems=["mtp-1", "dspark"])
    res = CliRunner().invoke(cli, ["plan", str(plain), "--quick", "--out", str(tmp_path / "p"), "--jobs", "1",
                                   "--attainment", "0.9", "--max-gpus", "8", "--rate-tolerance", "0.2",
                                   "--replicates", "1"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "p" / "plan.json").read_text())
    (line,) = engine_lines(doc)
    assert line in res.output and "no-speculation not compared (add it: --set systems+=ar)" in line
    assert html.escape(line) in (tmp_path / "p" / "report.html").read_text()
    table = pd.read_csv(tmp_path / "p" / "plan.csv")
    assert list(table.loc[table["engine_pick"], "system"]) == [doc["engine"][0]["policy"]]

"""`simulate bench`: an inference-perf profile read into a scenario, replayed once, reported per stage."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from simulator.cli import cli, main
from simulator.errors import UserError
from simulator.inputs.inference_perf import bench_scenario, read_profile
from simulator.outputs.metrics import emission_gaps, inter_token_gaps
from tests.conftest import H200_TABLE

# a small profile in inference-perf's format (the JSON it writes beside a run): a light stage, then a heavy one
SHARED = {"api": {"streaming": True, "type": "completion"},
          "data": {"type": "shared_prefix",
                   "shared_prefix": {"num_unique_system_prompts": 3, "num_users_per_system_prompt": 2,
                                     "system_prompt_len": 40, "question_len": 200, "output_len": 48,
                                     "enable_multi_turn_chat": False}},
          "load": {"type": "constant", "stages": [{"rate": 4, "duration": 8}, {"rate": 50, "duration": 8}]},
          "report": {"request_lifecycle": {"summary": True, "per_stage": True}},
          "server": {"type": "vllm", "model_name": "some/model", "ignore_eos": True}}
RANDOM = {"data": {"type": "random",
                   "input_distribution": {"min": 240, "max": 240, "mean": 240, "std_dev": 0},
                   "output_distribution": {"min": 48, "max": 48, "mean": 48, "std_dev": 0}},
          "load": {"type": "constant", "stages": [{"rate": 4, "duration": 8}, {"rate": 60, "duration": 8}]},
          "server": {"type": "vllm", "ignore_eos": True}}


def write(tmp_path, doc, name="profile.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc))
    return path


def test_shared_prefix_profile_maps_to_stages_and_a_shared_prefix(tmp_path):
    prof = read_profile(write(tmp_path, SHARED))
    assert prof.stages == [(8.0, 4.0), (8.0, 50.0)] and prof.send_seconds == 16.0 and prof.notes == []
    assert prof.traffic == {"kind": "poisson", "repeat": False, "exact_counts": True,
                            "segments": [{"duration_s": 8.0, "rate": 4.0}, {"duration_s": 8.0, "rate": 50.0}]}
    assert prof.workload["prompt"] == {"dist": "fixed", "value": 240}
    assert prof.workload["output"] == {"dist": "fixed", "value": 48}
    assert prof.workload["shared_prefix"] == {"tokens": 40, "groups": 3, "prompts_per_group": 2}  # the prompt pool
    doc = bench_scenario(prof, "t.csv", max_running=64, max_batch_tokens=1024, drain_s=30)
    assert doc["systems"] == ["ar"] and doc["engine"]["schedule"] == "mixed" and doc["engine"]["prefill"] == "colocated"
    assert doc["run"] == {"duration_s": 16.0, "warmup_s": 0.0, "drain_cap_s": 30.0}
    # the newer names of the same fields, a YAML profile, and what the replay leaves out said in notes
    sp = dict(SHARED["data"]["shared_prefix"])
    sp["num_groups"], sp["num_prompts_per_group"] = sp.pop("num_unique_system_prompts"), sp.pop("num_users_per_system_prompt")
    sp["enable_multi_turn_chat"] = True
    newer = {**SHARED, "data": {"type": "shared_prefix", "shared_prefix": sp}, "server": {"type": "vllm"}}
    prof = read_profile(write(tmp_path, newer, "p.yaml"))
    assert prof.workload["shared_prefix"] == {"tokens": 40, "groups": 3, "prompts_per_group": 2}  # the prompt pool
    assert any("enable_multi_turn_chat" in n for n in prof.notes) and any("ignore_eos" in n for n in prof.notes)


def test_poisson_load_is_a_poisson_count_per_stage(tmp_path):
    # inference-perf's poisson timer draws a Poisson count each second: a stage's count is Poisson, not exact
    doc = json.loads(json.dumps(SHARED))
    doc["load"]["type"] = "poisson"
    prof = read_profile(write(tmp_path, doc))
    assert prof.stages == [(8.0, 4.0), (8.0, 50.0)]
    assert prof.traffic == {"kind": "poisson", "repeat": False, "exact_counts": False,
                            "segments": [{"duration_s": 8.0, "rate": 4.0}, {"duration_s": 8.0, "rate": 50.0}]}
    assert [n for n in prof.notes if n.startswith("load.type poisson")]
    assert read_profile(write(tmp_path, SHARED, "c.json")).traffic["exact_counts"] is True  # constant: exact


def test_random_profile_lengths(tmp_path):
    uni = {**RANDOM, "data": {**RANDOM["data"], "input_distribution": {"type": "uniform", "min": 100, "max": 300}}}
    prof = read_profile(write(tmp_path, uni))
    assert prof.workload["prompt"] == {"dist": "uniform", "low": 100, "high": 300}
    assert prof.workload["output"] == {"dist": "fixed", "value": 48}
    assert "shared_prefix" not in prof.workload


@pytest.mark.parametrize("change, expect", [
    (lambda d: d["load"].update(type="concurrent"), "load.type: 'concurrent' is not supported; supported: constant "
                                                    r"\(rate stages, exponential gaps .*\) and poisson"),
    (lambda d: d["load"].update(stages=[]), "load.stages: expected a non-empty list"),
    (lambda d: d["load"]["stages"][1].update(rate="fast"), r"load.stages\[1\].rate: expected a number"),
    (lambda d: d["load"]["stages"][0].update(concurrency_level=8), r"load.stages\[0\].concurrency_level: unknown or "
                                                                     "unsupported field"),
    (lambda d: d["load"].update(sweep={"type": "linear"}), "load.sweep: not supported"),
    (lambda d: d["data"].update(type="shareGPT"), "data.type: 'shareGPT' is not supported"),
    (lambda d: d["data"]["shared_prefix"].pop("system_prompt_len"), "data.shared_prefix.system_prompt_len: required"),
    (lambda d: d["data"]["shared_prefix"].update(colour=1), "data.shared_prefix.colour: unknown or unsupported field"),
    (lambda d: d.update(extras=1), "extras: unknown or unsupported field"),
    (lambda d: d["data"]["shared_prefix"].update(output_distribution={"min": 10, "max": 90, "mean": 50,
                                                                      "std_dev": 10}),
     "data.shared_prefix.output_distribution: a normal distribution of lengths between 10 and 90 has no scenario"),
])
def test_profile_errors_are_one_line_naming_the_field(tmp_path, change, expect):
    doc = json.loads(json.dumps(SHARED))
    change(doc)
    path = write(tmp_path, doc)
    with pytest.raises(UserError, match=expect) as err:
        read_profile(path)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{path}: ")


def run_main(monkeypatch, capsys, *args):
    """``simulate ARGS`` through the console script's entry point: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["simulate", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr()
    return exit_.value.code, out.out, out.err


def test_cli_errors_exit_2_with_one_line(tmp_path, monkeypatch, capsys, scenario_file):
    doc = json.loads(json.dumps(SHARED))
    doc["load"]["type"] = "concurrent"
    path = write(tmp_path, doc)
    res = CliRunner().invoke(cli, ["bench", str(path), "--table", str(H200_TABLE), "--out", str(tmp_path / "o")])
    assert isinstance(res.exception, UserError) and "load.type: 'concurrent' is not supported" in str(res.exception)
    code, _, err = run_main(monkeypatch, capsys, "bench", str(path), "--table", str(H200_TABLE))
    assert code == 2 and err.strip().count("\n") == 0 and "load.type" in err and "supported: constant" in err
    # a scenario whose shared prefix fills the prompt
    scn = scenario_file(workload={"prompt": 128, "shared_prefix": {"tokens": 200, "groups": 2}})
    code, _, err = run_main(monkeypatch, capsys, "check", str(scn))
    assert code == 2 and err.strip().count("\n") == 0 and "workload.shared_prefix.tokens: 200 tokens do not fit" in err


def bench(tmp_path, profile: dict, *extra: str) -> tuple[pd.DataFrame, object]:
    path = write(tmp_path, profile)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["bench", str(path), "--table", str(H200_TABLE), "--max-running", "64",
                                   "--max-batch-tokens", "2048", "--drain-s", "20", "--out", str(out), *extra])
    assert res.exit_code == 0, (res.output, res.exception)
    return pd.read_csv(out / "bench.csv"), res


def test_bench_end_to_end_reports_each_stage(tmp_path):
    table, res = bench(tmp_path, RANDOM, "--write-scenario", str(tmp_path / "mine.yaml"))
    assert table["stage"].astype(str).tolist() == ["0", "1", "all"]
    assert "latencies in ms" in res.output and "bench.csv" in res.output
    light, heavy, whole = (table.iloc[i] for i in range(3))
    assert light["requests"] == 32 and heavy["requests"] == 480 and whole["requests"] == 512  # exact counts
    assert whole["completed"] == light["completed"] + heavy["completed"]
    for row in (light, heavy, whole):
        # TPOT x (output - 1) + TTFT is E2E request by request, so their means agree (bench.csv: 6 digits)
        assert row["tpot_mean_s"] * 47 + row["ttft_mean_s"] == pytest.approx(row["e2e_mean_s"], rel=1e-5)
        assert row["e2e_mean_s"] <= row["e2e_p90_s"] <= row["e2e_p99_s"]
        assert row["output_tokens_per_s"] == pytest.approx(row["requests_per_s"] * 48, rel=1e-5)
    assert heavy["e2e_mean_s"] >= light["e2e_mean_s"] and heavy["ttft_mean_s"] >= light["ttft_mean_s"]
    assert heavy["requests_per_s"] > light["requests_per_s"]
    assert not whole["overloaded"]
    # the scenario written for the planner is the one that ran, and loads as any scenario does
    mine = yaml.safe_load((tmp_path / "mine.yaml").read_text())
    assert mine == yaml.safe_load((tmp_path / "out" / "scenario.yaml").read_text())
    assert mine["traffic"]["repeat"] is False and mine["run"]["drain_cap_s"] == 20.0


def test_an_overload_is_flagged(tmp_path):
    heavy = json.loads(json.dumps(RANDOM))
    heavy["load"]["stages"] = [{"rate": 2, "duration": 6}, {"rate": 400, "duration": 6}]
    heavy["data"]["output_distribution"] = {"min": 400, "max": 400, "mean": 400, "std_dev": 0}
    table, _ = bench(tmp_path, heavy, "--kv-capacity-tokens", "60000", "--drain-s", "3")
    assert table["overloaded"].tolist() == [False, True, True]
    assert table.iloc[1]["unfinished"] > 0


def gaps_one_request_at_a_time(req, steps, chosen, stop):
    """The emission rule by brute force: per request, the steps of its replica that started once it was admitted
    and had its first token, up to its last token; its gaps are the differences of its first token and their ends."""
    gaps = []
    for r in np.flatnonzero(chosen & ~np.isnan(req["first_token"]) & ~np.isnan(req["admitted"])).tolist():
        mine = steps["replica"] == req["replica"][r]
        start_from = max(req["first_token"][r], req["admitted"][r])
        last = stop if np.isnan(req["finish"][r]) else req["finish"][r]
        ends = steps["end"][mine & (steps["start"] >= start_from - 1e-12) & (steps["end"] <= last + 1e-12)]
        gaps.append(np.diff(np.concatenate([[req["first_token"][r]], ends])))
    return np.concatenate(gaps)


def test_emission_gaps_are_the_pooled_inter_token_gaps(scenario_file):
    from tests.simulator.engine_helpers import simulate

    path = scenario_file(systems=["ar"], frontier=None, traffic={"kind": "poisson", "rate": 80.0})
    row, sim = simulate(path, concurrency=None, quick=True)
    req, steps = sim.requests.frame(), sim.steps.frame()
    end, warmup, stop = row["sim_seconds"], row["warmup_s"], row["sim_seconds"] + row["drain_seconds"]
    chosen = (req["arrival"] >= warmup) & (req["arrival"] < end) & ~req["rejected"]
    gaps, owner = emission_gaps(req, steps, chosen, stop)
    expected = gaps_one_request_at_a_time(req, steps, chosen, stop)
    assert np.allclose(np.sort(inter_token_gaps(req, steps, warmup, end, stop)), np.sort(expected))
    assert len(gaps) == len(expected) > 100
    # the same multiset of gaps (pooled in another order)
    assert np.allclose(np.sort(gaps), np.sort(expected))
    # every request's gaps add up to its first-to-last-token time
    done = np.flatnonzero(chosen & ~np.isnan(req["finish"]))
    per = np.bincount(owner, weights=gaps, minlength=len(req["arrival"]))
    assert np.allclose(per[done], req["finish"][done] - req["first_token"][done])


def test_bench_shared_prefix_end_to_end(tmp_path):
    """A shared-prefix profile replays end to end, its prefixes served by the engine's prefix cache."""
    table, _ = bench(tmp_path, SHARED)
    assert table["stage"].astype(str).tolist() == ["0", "1", "all"]
    assert table.iloc[1]["e2e_mean_s"] >= table.iloc[0]["e2e_mean_s"]


def vllm_result(tmp_path, **fields) -> Path:
    doc = {"backend": "vllm", "num_prompts": 200, "request_rate": 10.0, "burstiness": 1.0, "max_concurrency": None,
           "completed": 200, "total_input_tokens": 200 * 300, "total_output_tokens": 200 * 40, **fields}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("how", ["positional", "--from-vllm-bench", "simulate --from-vllm-bench"])
def test_a_vllm_bench_result_replays_its_rate_count_and_mean_lengths(tmp_path, how):
    path = vllm_result(tmp_path)
    args = {"positional": ["bench", str(path)], "--from-vllm-bench": ["bench", how, str(path)],
            "simulate --from-vllm-bench": ["--from-vllm-bench", str(path)]}[how]  # the last without `bench`
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, [*args, "--table", str(H200_TABLE), "--drain-s", "20", "--out", str(out)])
    assert res.exit_code == 0, (res.output, res.exception)
    table = pd.read_csv(out / "bench.csv")
    whole = table[table["stage"].astype(str) == "all"].iloc[0]
    assert whole["requests"] == 200 and whole["rate"] == pytest.approx(10.0)  # 200 prompts over 20 s
    scenario = yaml.safe_load((out / "scenario.yaml").read_text())
    assert scenario["workload"]["prompt"] == {"dist": "fixed", "value": 300}
    assert scenario["workload"]["output"] == {"dist": "fixed", "value": 40}


@pytest.mark.parametrize(("cap", "at_once"), [(16, 16), (None, 64)])
def test_a_closed_loop_vllm_result_replays_its_prompt_list(tmp_path, cap, at_once):
    """`--max-concurrency C --request-rate inf` (all at once without a cap): the list of num_prompts, at most C at a
    time, run to its last request as one stage; the scenario written reruns it with `simulate`, to the same
    figures."""
    path = vllm_result(tmp_path, num_prompts=64, completed=64, total_input_tokens=64 * 300,
                       total_output_tokens=64 * 40, request_rate="inf", max_concurrency=cap)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["bench", str(path), "--table", str(H200_TABLE), "--out", str(out)])
    assert res.exit_code == 0, (res.output, res.exception)
    assert f"64 prompts, at most {at_once} at a time" in res.output
    table = pd.read_csv(out / "bench.csv")
    assert table["stage"].astype(str).tolist() == ["0", "all"]
    whole = table.iloc[-1]
    assert whole["requests"] == whole["completed"] == 64 and whole["unfinished"] == 0 and not whole["overloaded"]
    scenario = yaml.safe_load((out / "scenario.yaml").read_text())
    assert scenario["frontier"] == {"concurrency": [at_once], "requests": [64]} and "traffic" not in scenario
    rerun = CliRunner().invoke(cli, [str(out / "scenario.yaml"), "--out", str(tmp_path / "rerun")])
    assert rerun.exit_code == 0, (rerun.output, rerun.exception)
    row = pd.read_csv(tmp_path / "rerun" / "runs.csv").iloc[0]
    assert row["requests"] == 64 and row["unfinished"] == 0
    assert row["throughput_per_gpu"] * row["gpus"] == pytest.approx(whole["output_tokens_per_s"], rel=1e-6)


@pytest.mark.parametrize(("fields", "expect"), [
    ({"max_concurrency": 8}, "max_concurrency: 8 with request_rate 10.0: a concurrency cap on a finite rate is not "
                             "supported"),
    ({"request_rate": "inf", "max_concurrency": 0}, "max_concurrency: expected a positive whole number or null, got 0"),
    ({"request_rate": "inf", "num_prompts": 12.5}, "num_prompts: expected a whole number, got 12.5"),
    ({"burstiness": 0.5}, "burstiness: 0.5: only Poisson arrivals (1.0) are supported"),
    ({"completed": 0}, "completed: expected a positive number, got 0"),
])
def test_a_vllm_bench_result_it_cannot_replay_is_one_line(tmp_path, fields, expect):
    path = vllm_result(tmp_path, **fields)
    res = CliRunner().invoke(cli, ["bench", "--from-vllm-bench", str(path), "--table", str(H200_TABLE)])
    assert isinstance(res.exception, UserError) and "\n" not in str(res.exception)
    assert expect in str(res.exception)
    both = CliRunner().invoke(cli, ["bench", str(path), "--from-vllm-bench", str(path), "--table", str(H200_TABLE)])
    assert isinstance(both.exception, UserError) and "expected one benchmark" in str(both.exception)

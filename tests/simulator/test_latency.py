"""The latency figures of `vllm bench serve` (TTFT, TPOT, ITL, end-to-end) from the request and step records, and
runs written as its --save-result JSON, which `hw-profile calibrate` reads back."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from simulator.cli import cli
from simulator.outputs.metrics import followed, inter_token_gaps, user_speed
from tests.simulator.engine_helpers import simulate


def test_each_request_emits_once_per_step_it_runs_in_and_the_gaps_add_up(scenario_file):
    for prefill in ("colocated", "disaggregated"):
        path = scenario_file(systems=["dspark"], frontier=None, traffic={"kind": "poisson", "rate": 150.0},
                             engine={"max_running": 64, "max_batch_tokens": 4096, "prefill": prefill})
        row, sim = simulate(path, concurrency=None, quick=True)
        req, steps = sim.requests.frame(), sim.steps.frame()
        end, warmup, stop = row["sim_seconds"], row["warmup_s"], row["sim_seconds"] + row["drain_seconds"]
        sel = np.flatnonzero(followed(req, warmup, end) & ~np.isnan(req["finish"]) & (req["preemptions"] == 0))
        assert len(sel) > 50
        total = 0
        for r in sel:
            alone = {**req, "arrival": np.where(np.arange(len(req["arrival"])) == r, req["arrival"], -1.0)}
            gaps = inter_token_gaps(alone, steps, warmup, end, stop)  # request r alone is followed
            # one gap per decode step it took; together they span first token to last token
            assert len(gaps) == req["decode_steps"][r]
            assert gaps.sum() == pytest.approx(req["finish"][r] - req["first_token"][r], abs=1e-9)
            assert (gaps > 0).all()
            total += len(gaps)
            if total > 400:
                break
        pooled = inter_token_gaps(req, steps, warmup, end, stop)
        assert row["itl_mean"] == pytest.approx(pooled.mean())
        assert row["itl_p50"] <= row["itl_p90"] <= row["itl_p99"]


def test_tpot_and_e2e_by_hand(scenario_file):
    path = scenario_file(systems=["mtp-1"], frontier=None, traffic={"kind": "poisson", "rate": 100.0})
    row, sim = simulate(path, concurrency=None, quick=True)
    req = sim.requests.frame()
    sel = followed(req, row["warmup_s"], row["sim_seconds"])
    assert row["unfinished"] == 0
    speed = user_speed(req["output"][sel], req["first_token"][sel], req["finish"][sel])
    speed = speed[~np.isnan(speed)]
    assert row["tpot_mean"] == pytest.approx(np.mean(1 / speed))
    assert row["tpot_p90"] == pytest.approx(1 / np.percentile(speed, 10))  # the slowest users' TPOT
    e2el = req["finish"][sel] - req["arrival"][sel]
    assert row["e2el_mean"] == pytest.approx(e2el.mean()) and row["e2el_p99"] == pytest.approx(np.percentile(e2el, 99))
    ttft = req["first_token"][sel] - req["arrival"][sel]
    assert row["ttft_mean"] == pytest.approx(ttft.mean()) and row["ttft_p90"] == pytest.approx(np.percentile(ttft, 90))
    assert row["ttft_p50"] <= row["ttft_p90"] <= row["ttft_p99"]


@pytest.mark.slow
def test_vllm_bench_results_sit_beside_runs_csv_and_calibrate_reads_them_back(scenario_file, tmp_path):
    from hw_profile.calibrate.observations import read_telemetry

    path = scenario_file(systems=["mtp-1", "dspark"], frontier={"concurrency": [4, 16, 64]},
                         traffic={"kind": "poisson", "rate": 100.0})
    out = tmp_path / "o"
    res = CliRunner().invoke(cli, [str(path), "--quick", "--out", str(out), "--jobs", "1", "--format", "vllm-bench"])
    assert res.exit_code == 0, res.output
    runs = pd.read_csv(out / "runs.csv")
    for col in ("ttft_mean", "ttft_p90", "tpot_mean", "tpot_p99", "itl_mean", "itl_p50", "itl_p90", "itl_p99",
                "e2el_mean", "e2el_p50", "e2el_p90", "e2el_p99"):
        assert runs[col].notna().all(), col
    opened = json.loads((out / "vllm-bench" / "open" / "dspark-seed0.json").read_text())
    row = runs[(runs["policy"] == "dspark") & (runs["load_point"] == "open")].iloc[0]
    assert opened["max_concurrency"] is None and opened["request_rate"] == pytest.approx(row["arrival_rate"])
    # runs.csv keeps 6 significant digits
    assert opened["median_itl_ms"] == pytest.approx(row["itl_p50"] * 1e3, rel=1e-5)
    assert opened["p99_e2el_ms"] == pytest.approx(row["e2el_p99"] * 1e3, rel=1e-5)
    assert opened["completed"] == row["requests"] - row["unfinished"]
    # the closed-loop files of one system are a sweep over --max-concurrency: calibrate's input
    obs, _ = read_telemetry(out / "vllm-bench" / "dspark")
    closed = runs[(runs["policy"] == "dspark") & runs["concurrency"].notna()].sort_values("concurrency")
    assert obs["requests"].tolist() == closed["concurrency"].tolist()
    assert obs["tau"].to_numpy() == pytest.approx(closed["tau"].to_numpy(), rel=1e-5)
    assert obs["verify_budget"].to_numpy() == pytest.approx(closed["mean_verify_budget"].to_numpy(), rel=1e-5)

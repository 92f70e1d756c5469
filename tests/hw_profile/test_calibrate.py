"""Calibration from telemetry: the fit's maths, each reader on files written here in its format, the CLI's
one-line errors, and the round trip simulate -> runs.csv -> calibrate."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw_profile.calibrate.calibrate import Calibration, DraftShare, calibrated_table, fit, pav
from hw_profile.calibrate.observations import Assumptions, read_telemetry
from hw_profile.cli import main as hw_main
from hw_profile.errors import HwProfileError
from hw_profile.tables.step_table import StepTable


def run(argv, capsys):
    code = 0
    try:
        hw_main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def obs_frame(b, k, t, r=None) -> pd.DataFrame:
    b = np.asarray(b, float)
    return pd.DataFrame({"batch_tokens": b, "kv_tokens": np.asarray(k, float), "step_ms": np.asarray(t, float),
                         "requests": b if r is None else np.asarray(r, float), "weight": 1.0})


# --- the maths ---------------------------------------------------------------------------------------------------

def test_pav_textbook_case_and_brute_force():
    _, g = pav(np.array([1.0, 2, 3, 4]), np.array([1.0, 3, 2, 4]), np.ones(4))
    assert np.allclose(g, [1, 2.5, 2.5, 4])
    # brute force over a fine grid of monotone candidates is never better than PAV
    rng = np.random.default_rng(0)
    y = rng.normal(size=6)
    _, g = pav(np.arange(6.0), y, np.ones(6))
    sse = float(np.sum((g - y) ** 2))
    for _ in range(2000):
        cand = np.sort(rng.normal(size=6))
        assert np.sum((cand - y) ** 2) >= sse - 1e-12


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.floats(-5, 5), st.floats(0.1, 3)), min_size=1, max_size=40))
def test_pav_is_monotone_and_keeps_the_weighted_mean(points):
    x = np.array([p[0] for p in points], float)
    y = np.array([p[1] for p in points])
    w = np.array([p[2] for p in points])
    ux, g = pav(x, y, w)
    assert np.all(np.diff(g) >= -1e-9)
    wsum = np.array([w[x == v].sum() for v in ux])
    assert np.sum(g * wsum) == pytest.approx(np.sum(w * y), rel=1e-9, abs=1e-9)


def test_fit_recovers_a_known_step_model_with_its_uncertainty():
    rng = np.random.default_rng(1)
    b = rng.integers(8, 800, 300).astype(float)
    k = b * rng.uniform(500, 8000, 300)  # several contexts: K is identifiable
    truth = 12.0 + 0.03 * b + 2e-6 * k
    t = truth * (1 + rng.normal(0, 0.01, 300))
    cal = fit(obs_frame(b, k, t), form="linear")
    got = np.array([cal.fixed_ms, cal.ms_per_token, cal.ms_per_kv_token])
    se = np.array([cal.stderr["fixed_ms"], cal.stderr["ms_per_token"], cal.stderr["ms_per_kv_token"]])
    assert np.all(np.abs(got - [12.0, 0.03, 2e-6]) < 4 * se)
    assert np.all(se > 0)
    assert abs(np.sqrt(np.mean(cal.residual_pct**2)) - 1.0) < 0.2  # the 1% noise, seen as residuals


def test_collinear_telemetry_takes_the_given_kv_cost_and_says_so():
    c = np.array([4.0, 20, 60, 120, 200])
    b, k = 2 * c, 3000 * c
    t = 14 + 0.03 * b + 1e-6 * k
    cal = fit(obs_frame(b, k, t, r=c))
    assert cal.ms_per_kv_token == 0.0 and any("proportional" in n for n in cal.notes)
    assert cal.ms_per_token == pytest.approx(0.03 + 1e-6 * 1500)  # carries both
    given_kv = fit(obs_frame(b, k, t, r=c), kv_ns_per_token=1.0)
    assert given_kv.ms_per_token == pytest.approx(0.03) and given_kv.fixed_ms == pytest.approx(14.0)


def test_negative_coefficients_are_clamped_at_zero():
    b = np.array([10.0, 20, 40, 80])
    cal = fit(obs_frame(b, 0 * b, 50 - 0.1 * b), form="linear")  # falling step times: no cost per token
    assert cal.ms_per_token == 0.0 and cal.fixed_ms > 0
    assert any("clamped" in n for n in cal.notes)


def test_drafter_share_is_taken_out_of_the_target():
    r = np.array([4.0, 16, 64, 128, 256])
    b, k = 2 * r, 0 * r
    a, slope, f = 10.0, 0.02, 0.1  # the drafter: a tenth of the target's layers, one token per request
    observed = a + slope * b + f * (a + slope * r)
    cal = fit(obs_frame(b, k, observed, r=r), draft=DraftShare(2, 20), form="linear")
    assert cal.fixed_ms == pytest.approx(a) and cal.ms_per_token == pytest.approx(slope)


def test_isotonic_form_keeps_real_steps_and_extrapolates_with_the_linear_slope():
    rng = np.random.default_rng(2)
    b = rng.integers(1, 512, 400).astype(float)
    truth = 10 + 0.02 * b + 3.0 * (b > 256)  # a wave-quantisation cliff
    cal = fit(obs_frame(b, 0 * b, truth * (1 + rng.normal(0, 0.005, 400))))
    assert cal.form == "isotonic"
    inside = cal.target_ms(np.array([100.0, 300.0]), 0.0)
    assert np.allclose(inside, [12.0, 19.0], rtol=0.02)
    assert np.all(np.diff(cal.target_ms(np.arange(1.0, 2000.0), 0.0)) >= -1e-9)  # monotone everywhere
    hi = cal.iso_b[-1]
    assert cal.target_ms(hi + 100, 0.0) - cal.target_ms(hi, 0.0) == pytest.approx(100 * cal.ms_per_token)


def test_calibrated_table_reads_back_as_the_fit(tmp_path):
    cal = fit(obs_frame([10, 100, 300], [1e4, 1e5, 3e5], [12.0, 15.0, 21.0]), kv_ns_per_token=2.0)
    path = calibrated_table(cal, name="t", inputs={"file": "x"}).write(tmp_path / "t.csv")
    table = StepTable.read(path)
    assert table.meta["kind"] == "calibrated"
    for bq, kq in ((10, 1e4), (250, 2e5), (5000, 3e6)):
        assert table.grid.step_ms(bq, kq) == pytest.approx(float(cal.target_ms(bq, kq)), rel=1e-5)  # CSV: 6 digits


# --- readers -----------------------------------------------------------------------------------------------------

def test_dashboard_by_concurrency_and_by_speed_agree(tmp_path):
    c = np.array([10.0, 50, 100, 200])
    step_s = (14 + 0.03 * 2 * c) / 1e3
    x = c * 1.9 / step_s
    (tmp_path / "conc.csv").write_text(pd.DataFrame({"concurrency": c, "throughput_per_gpu": x}).to_csv(index=False))
    (tmp_path / "speed.csv").write_text(pd.DataFrame({"tps_per_user": 1.9 / step_s,
                                                      "throughput_per_gpu": x}).to_csv(index=False))
    a = Assumptions(tau=1.9, verify_budget=2, context=3000)
    o1, _ = read_telemetry(tmp_path / "conc.csv", a)
    o2, _ = read_telemetry(tmp_path / "speed.csv", a)
    for col in ("batch_tokens", "kv_tokens", "step_ms"):
        assert np.allclose(o1[col], o2[col])
    assert np.allclose(o1["step_ms"], step_s * 1e3)


def test_long_format_with_where(tmp_path):
    rows = [{"figure": f, "model": "m", "system": "mtp-1", "x_name": xn, "x": x, "y_name": "throughput_per_gpu",
             "y": y} for f, xn, x, y in (("fig8", "concurrency", 0.0, 40.0), ("fig8", "concurrency", 10, 1000),
                                         ("fig8", "concurrency", 100, 8000), ("fig7", "tps_per_user", 80, 9000))]
    (tmp_path / "long.csv").write_text(pd.DataFrame(rows).to_csv(index=False))
    obs, _ = read_telemetry(tmp_path / "long.csv", Assumptions(tau=2, verify_budget=2, context=0),
                               where={"figure": "fig8"})
    assert len(obs) == 2  # the origin carries no step time
    assert obs["step_ms"].tolist() == pytest.approx([20.0, 25.0])
    with pytest.raises(ValueError, match="one curve"):
        read_telemetry(tmp_path / "long.csv", Assumptions(tau=2, verify_budget=2, context=0))


def write_vllm_sweep(folder, truth, tau_counts=(1000, 4000, 2600, [900, 700, 600, 400]), context=(1000, 500)):
    """One `vllm bench serve --save-result` JSON per --max-concurrency, in its field names."""
    folder.mkdir()
    drafts, draft_tokens, accepted, per_pos = tau_counts
    tau = 1 + accepted / drafts
    budget = 1 + draft_tokens / drafts
    for conc in (1, 4, 16, 64):
        step = truth(conc * budget, conc * (context[0] + context[1] / 2))
        done = 200
        result = {
            "date": "20260101-000000", "backend": "vllm", "model_id": "m", "max_concurrency": conc,
            "completed": done, "total_input_tokens": done * context[0], "total_output_tokens": done * context[1],
            "request_throughput": 1.0, "output_throughput": conc * tau / step * 1e3,
            "mean_ttft_ms": 50.0, "median_ttft_ms": 45.0, "p99_ttft_ms": 90.0,
            "mean_tpot_ms": step / tau, "median_tpot_ms": step / tau, "p99_tpot_ms": 1.3 * step / tau,
            "num_drafts": drafts, "num_draft_tokens": draft_tokens, "num_accepted_tokens": accepted,
            "accepted_per_pos": per_pos,
        }
        (folder / f"vllm-c{conc}.json").write_text(json.dumps(result))
    return tau, budget


def test_vllm_results_give_tau_budget_position_acceptance_and_step(tmp_path):
    def truth(b, k):
        return 8.0 + 0.05 * b + 1e-6 * k

    tau, budget = write_vllm_sweep(tmp_path / "sweep", truth)
    obs, info = read_telemetry(tmp_path / "sweep")
    assert tau == pytest.approx(3.6) and budget == pytest.approx(5.0)
    assert obs["tau"].tolist() == pytest.approx([3.6] * 4)
    assert info["points"][0]["position_acceptance"] == pytest.approx([0.9, 0.7, 0.6, 0.4])
    assert info["points"][0]["context"] == pytest.approx(1250)
    assert np.allclose(obs["step_ms"], truth(obs["batch_tokens"], obs["kv_tokens"]))
    by_thr, _ = read_telemetry(tmp_path / "sweep", Assumptions(step_from="throughput"))
    assert np.allclose(by_thr["step_ms"], obs["step_ms"])


def test_vllm_prefixed_and_nested_counters_read_alike(tmp_path):
    folder = tmp_path / "nested"
    folder.mkdir()
    base = {"max_concurrency": 8, "completed": 10, "total_input_tokens": 1000, "total_output_tokens": 500,
            "mean_tpot_ms": 10.0, "output_throughput": 100.0}
    (folder / "a.json").write_text(json.dumps({**base, "spec_decode": {
        "spec_decode_num_drafts": 10, "spec_decode_draft_tokens": 30, "spec_decode_accepted_tokens": 20}}))
    obs, _ = read_telemetry(folder)
    assert obs["tau"][0] == pytest.approx(3.0) and obs["verify_budget"][0] == pytest.approx(4.0)
    assert obs["step_ms"][0] == pytest.approx(30.0)


# --- the command -------------------------------------------------------------------------------------------------

def test_cli_writes_a_calibrated_table_from_vllm_results(tmp_path, capsys):
    write_vllm_sweep(tmp_path / "sweep", lambda b, k: 8.0 + 0.05 * b + 1e-6 * k)
    code, out, err = run(["calibrate", str(tmp_path / "sweep"), "--out", str(tmp_path / "t.csv")], capsys)
    assert code == 0, err
    table = StepTable.read(tmp_path / "t.csv")
    cal = table.meta["calibration"]
    assert table.meta["kind"] == "calibrated" and table.meta["inputs"]["format"].startswith("vllm")
    assert cal["residuals_pct"]["max_abs"] < 1e-6 and "stderr" in cal and "observed_range" in cal
    assert table.grid.step_ms(50, 0) == pytest.approx(8.0 + 0.05 * 50 + 0, rel=0.05)
    assert "ms" in out and "us/token" in out


def test_an_overloaded_point_of_the_projects_own_export_is_skipped_with_a_note(tmp_path, capsys):
    """`simulate --format vllm-bench` writes null TPOT for a closed-loop point at which nothing finished: calibrate
    skips that file with a note, rather than refusing the sweep; all empty is one line."""
    write_vllm_sweep(tmp_path / "sweep", lambda b, k: 8.0 + 0.05 * b + 1e-6 * k)
    doc = json.loads((tmp_path / "sweep" / "vllm-c64.json").read_text())
    (tmp_path / "sweep" / "vllm-c64.json").write_text(json.dumps({**doc, "mean_tpot_ms": None}))
    obs, info = read_telemetry(tmp_path / "sweep")
    assert obs["requests"].tolist() == [1.0, 4.0, 16.0] and len(info["skipped"]) == 1
    code, _, err = run(["calibrate", str(tmp_path / "sweep"), "--out", str(tmp_path / "t.csv")], capsys)
    assert code == 0, err
    assert "note: vllm-c64.json: mean_tpot_ms is empty (no request finished its run: an overloaded point), skipped" in err
    for f in (tmp_path / "sweep").glob("*.json"):
        f.write_text(json.dumps({**json.loads(f.read_text()), "mean_tpot_ms": None}))
    with pytest.raises(HwProfileError, match="at least one result with a step time"):
        read_telemetry(tmp_path / "sweep")


@pytest.mark.parametrize("make, argv, words", [
    (lambda p: p.write_text("concurrency,throughput_per_gpu\n10,1000\n20,1900\n"), [],
     ["tau", "--tau"]),
    (lambda p: p.write_text("concurrency,throughput_per_gpu\n10,1000\n20,abc\n"), ["--tau", "2", "--verify-budget",
                                                                                    "2", "--context", "0"],
     ["line 3", "throughput_per_gpu"]),
    (lambda p: p.write_text("foo,bar\n1,2\n"), ["--tau", "2"], ["columns", "throughput_per_gpu"]),
    (lambda p: p.write_text("policy,mean_running,throughput_per_gpu,tau,mean_verify_budget\n"
                            "a,10,100,2,2\nb,10,100,2,2\n"), [], ["--system", "a, b"]),
    (lambda p: (p.mkdir(), (p / "x.json").write_text(json.dumps({"max_concurrency": 4}))), [],
     ["x.json", "mean_tpot_ms"]),
    (lambda p: (p.mkdir(), (p / "x.json").write_text(json.dumps({"mean_tpot_ms": 4}))), [],
     ["x.json", "max_concurrency"]),
    (lambda p: (p.mkdir(), (p / "x.json").write_text("{nope")), [], ["x.json", "JSON"]),
    (lambda p: p.write_text("concurrency,throughput_per_gpu\n10,1000\n20,1900\n"), ["--tau", "0.5"], ["--tau"]),
])
def test_cli_bad_input_is_one_line(tmp_path, capsys, make, argv, words):
    path = tmp_path / "telemetry"
    make(path)
    code, _, err = run(["calibrate", str(path), "--out", str(tmp_path / "t.csv"), *argv], capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err


def test_summary_of_a_calibration_is_json_serialisable():
    cal = fit(obs_frame([10, 100, 300], [0, 0, 0], [12.0, 15.0, 21.0]))
    assert isinstance(cal, Calibration)
    json.dumps(cal.summary())

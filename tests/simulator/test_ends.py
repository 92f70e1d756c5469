"""Where requests end: the end-token hazard fitted to recorded requests (constant or piecewise, as the
likelihood-ratio test decides), draws from it (also conditioned on a recorded request's censored length), and the
sources that replay ends: a trace that records them (``source: trace``) and a profile fitted to it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from simulator.core.acceptance.ends import NEVER, EndModel, _chi2_sf, fit_ends
from simulator.core.acceptance.trace_fit import fit_profile_file
from simulator.inputs.config import load_scenario
from tests.simulator.engine_helpers import simulate

GAMMA = 4


def draw_ends(hazard: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """End positions with hazard[t - 1] at token t (the last value beyond), by simulating token by token."""
    out = np.full(n, NEVER, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    for t in range(1, 400):
        h = hazard[min(t, len(hazard)) - 1]
        hit = alive & (rng.random(n) < h)
        out[hit] = t
        alive &= ~hit
    return out


@pytest.mark.parametrize(("x", "df"), [(0.3, 1), (3.84, 1), (9.0, 3), (25.0, 6), (2.0, 11), (60.0, 20)])
def test_chi_square_tail_matches_scipy(x, df):
    assert _chi2_sf(x, df) == pytest.approx(stats.chi2.sf(x, df), rel=1e-9, abs=1e-14)


def test_constant_hazard_is_the_mle_and_kept_for_geometric_ends():
    rng = np.random.default_rng(1)
    end = rng.geometric(0.03, 5000)
    cap = rng.integers(20, 120, 5000)
    output, eos = np.minimum(end, cap), end <= cap
    fit = fit_ends(output, eos)
    assert fit["kind"] == "constant-hazard"
    assert fit["hazard"] == pytest.approx(eos.sum() / output.sum(), rel=1e-6)  # events / tokens generated
    assert fit["hazard"] == pytest.approx(0.03, rel=0.06)
    assert fit["fit"]["p_value"] >= 0.05 and fit["fit"]["censored"] == int((~eos).sum())


def test_a_hazard_that_changes_with_position_is_fitted_piecewise():
    rng = np.random.default_rng(2)
    hazard = np.where(np.arange(1, 200) < 16, 0.002, 0.06)
    end = draw_ends(hazard, 6000, rng)
    cap = rng.integers(24, 97, 6000)
    fit = fit_ends(np.minimum(end, cap), end <= cap)
    assert fit["kind"] == "piecewise-hazard" and fit["fit"]["p_value"] < 1e-6
    assert fit["bins"][:6] == [1, 2, 4, 8, 16, 32]
    assert fit["hazard"][4] == pytest.approx(0.06, rel=0.1) and fit["hazard"][3] < 0.01


def test_draws_follow_the_survival_function_and_its_conditional():
    model = EndModel({"kind": "piecewise-hazard", "bins": [1, 4, 16], "hazard": [0.01, 0.05, 0.1]})
    h = np.array([0.01] * 3 + [0.05] * 12 + [0.1] * 400)
    survival = np.cumprod(1 - h)  # P(E > t), t = 1, 2, ...
    rng = np.random.default_rng(3)
    e = model.draw(200_000, rng)
    for t in (1, 3, 4, 10, 15, 16, 30):
        assert (e > t).mean() == pytest.approx(survival[t - 1], abs=0.004)
    cond = model.draw(200_000, rng, survived=np.full(200_000, 10))
    assert cond.min() == 11
    for t in (12, 15, 20, 30):
        assert (cond > t).mean() == pytest.approx(survival[t - 1] / survival[9], abs=0.004)


def test_no_end_token_seen_means_no_end():
    fit = fit_ends(np.array([30, 40, 50]), np.array([False, False, False]))
    assert fit["kind"] == "none"
    assert (EndModel(fit).draw(100, np.random.default_rng(0)) == NEVER).all()


def finished(sim, scenario) -> pd.DataFrame:
    """The requests that finished in the run, indexed by id, with their mix entry's name."""
    req = pd.DataFrame(sim.requests.frame())
    req["entry"] = np.array(list(load_scenario(scenario).model.workload.mix))[req["mix"].to_numpy()]
    return req[req["finish"].notna() & ~req["rejected"].astype(bool)]


def live_like_trace(path, rng, requests=400):
    """A trace as a live run writes it: rows of each request in order, with where it ended."""
    rows = []
    for rid in range(requests):
        domain = ("math", "chat")[rid % 2]
        end = int(rng.geometric(0.08 if domain == "math" else 0.02))
        cap = int(rng.integers(24, 97))
        output, eos = min(end, cap), end <= cap
        for _ in range(max(1, output // 2)):
            acc = int(np.argmin(np.r_[rng.random(GAMMA) < 0.7, False]))
            c = rng.uniform(0.3, 1.0, GAMMA)
            rows.append({"domain": domain, "benchmark": f"{domain}-bench", "drafter": "dspark", "gamma": GAMMA,
                         "accepted": acc, "request": rid, "output": output, "eos": int(eos),
                         **{f"c_{j + 1}": c[j] for j in range(GAMMA)}, **{f"raw_{j + 1}": c[j] for j in range(GAMMA)}})
    df = pd.DataFrame(rows)
    df.to_csv(path, index=False)
    return df.drop_duplicates("request").set_index("request")


def test_a_trace_replay_ends_its_requests_where_they_ended(scenario_file, tmp_path):
    recorded = live_like_trace(tmp_path / "trace.csv", np.random.default_rng(4))
    scn = scenario_file(acceptance={"source": "trace", "trace": str(tmp_path / "trace.csv")},
                        drafter={"name": "dspark", "gamma": GAMMA}, systems=["static-3"],
                        workload={"mix": {"math": 1, "chat": 1}, "output": {"dist": "uniform", "low": 24, "high": 96}},
                        frontier={"concurrency": [8]}, run={"duration_s": 3.0, "warmup_s": 0.1})
    _, sim = simulate(scn)
    done = finished(sim, scn)
    assert len(done) > 50
    same = [(rid, out) for rid, out, m in zip(done.index, done["output"], done["entry"], strict=True)
            if rid in recorded.index and recorded.loc[rid, "domain"] == m]
    assert len(same) > 20
    for rid, out in same:  # a recorded end token ends it there unless its own drawn length came first
        rec = recorded.loc[rid]
        if rec["eos"]:  # its end token at rec.output: there, or at its own drawn length (>= 24) before
            assert min(24, rec["output"]) <= out <= rec["output"]
        else:  # censored at rec.output: its end token comes later, if at all
            assert out >= min(24, rec["output"] + 1)
    # the ends make math requests (hazard 0.08) far shorter than chat ones (0.02), as recorded
    by = done.groupby("entry")["output"].mean()
    assert by["math"] < 0.5 * by["chat"]


@pytest.mark.slow
def test_the_fitted_profile_ends_requests_as_the_trace_did(scenario_file, tmp_path):
    live_like_trace(tmp_path / "trace.csv", np.random.default_rng(5), requests=2000)
    profile = fit_profile_file(tmp_path / "trace.csv", tmp_path / "fitted.yaml")
    for domain, hazard in (("math", 0.08), ("chat", 0.02)):
        end = profile["ends"][domain]
        assert end["kind"] == "constant-hazard" and end["hazard"] == pytest.approx(hazard, rel=0.12)
    text = yaml.safe_load((tmp_path / "fitted.yaml").read_text())
    assert text["ends"]["math"]["fit"]["requests"] == 1000
    common = dict(drafter={"name": "dspark", "gamma": GAMMA}, systems=["static-3"],
                  workload={"mix": {"math": 1, "chat": 1}, "output": {"dist": "uniform", "low": 24, "high": 96}},
                  frontier={"concurrency": [8]}, run={"duration_s": 3.0, "warmup_s": 0.1})
    scn = scenario_file(name="p", acceptance={"source": "profile", "profile": str(tmp_path / "fitted.yaml")}, **common)
    _, sim = simulate(scn)
    done = finished(sim, scn)
    rng = np.random.default_rng(6)
    for domain, hazard in (("math", 0.08), ("chat", 0.02)):  # E[min(geometric, uniform cap)] by simulation
        expect = np.minimum(rng.geometric(hazard, 200_000), rng.integers(24, 97, 200_000)).mean()
        assert done["output"][done["entry"] == domain].mean() == pytest.approx(expect, rel=0.15)


def test_the_workload_can_take_output_lengths_from_a_live_trace(scenario_file, tmp_path):
    path = tmp_path / "trace.csv"
    recorded = live_like_trace(path, np.random.default_rng(7), requests=300)
    df = pd.read_csv(path)
    running = df["request"] >= 280  # still running when the recording stopped: cut short, left out
    df["finished"] = (~running).astype(int)
    df.loc[running, "output"] = 500
    df.to_csv(path, index=False)
    scn = scenario_file(systems=["static-3"], workload={"mix": {"math": 1, "chat": 1}, "prompt": 64,
                                                        "output": {"dist": "recorded", "trace": str(path)}},
                        frontier={"concurrency": [8]}, run={"duration_s": 3.0, "warmup_s": 0.1})
    _, sim = simulate(scn)
    drawn = pd.DataFrame(sim.requests.frame())["output"].to_numpy()
    finished_lengths = recorded["output"].to_numpy()[:280]
    assert len(drawn) > 100 and set(drawn.tolist()) <= set(finished_lengths.tolist())
    assert drawn.mean() == pytest.approx(finished_lengths.mean(), rel=0.15)


def test_recorded_lengths_need_a_live_trace_and_give_outputs_only(scenario_file, tmp_path):
    from simulator.errors import UserError

    path = tmp_path / "plain.csv"
    pd.DataFrame({"domain": ["math"], "benchmark": ["a"], "drafter": ["dspark"], "gamma": [4],
                  "accepted": [2]}).to_csv(path, index=False)
    scn = scenario_file(systems=["static-3"], workload={"output": {"dist": "recorded", "trace": str(path)}})
    with pytest.raises(UserError, match="dist 'recorded' needs a trace that records where its requests ended"):
        simulate(scn)
    with pytest.raises(UserError, match=r"workload\.prompt.*a live trace records no prompt lengths"):
        load_scenario(scenario_file(name="p", workload={"prompt": {"dist": "recorded", "trace": str(path)}}))

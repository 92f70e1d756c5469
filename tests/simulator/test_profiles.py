"""The built-in paper profiles, sampled through the engine's own source, against the paper's Table 1 and figures."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator.acceptance.latent import Variation, conditional_acceptance, solve_latent
from simulator.acceptance.profile import PROFILE_DIR, ProfileSource, load_profile
from simulator.calibration import confidence_report

TABLE1 = pd.read_csv(PROFILE_DIR / "paper-table1.csv")
BENCHMARKS = [c for c in TABLE1.columns if c not in ("target", "drafter")]
TARGETS = sorted(TABLE1.target.unique())
STEPS = 30_000


def sample(profile, drafter: str, key: str, n: int = STEPS, calibrated: bool = True, seed: int = 0):
    """n request-steps of full-block verification through ProfileSource, one request per step."""
    src = ProfileSource(profile, drafter, profile.drafters[drafter].gamma, [key], calibrated, np.random.default_rng(seed))
    ids = np.arange(n)
    src.attach(ids, np.zeros(n, dtype=np.int64))
    prop = src.propose(ids)
    accepted = src.verify(prop, np.full(n, src.gamma))
    return prop.confidence, accepted


@pytest.mark.parametrize("target", TARGETS)
def test_full_block_tau_reproduces_table_1_in_every_cell(target):
    profile = load_profile(f"paper-{target}")
    for drafter in ("dspark", "dflash", "eagle3"):
        row = TABLE1[(TABLE1.target == target) & (TABLE1.drafter == drafter)].iloc[0]
        for bench in BENCHMARKS:
            _, accepted = sample(profile, drafter, bench)
            tau = 1.0 + accepted.mean()
            assert tau == pytest.approx(row[bench], rel=0.03), f"{target}/{drafter}/{bench}"


def domain_curve(profile, drafter: str, domain: str) -> np.ndarray:
    _, accepted = sample(profile, drafter, domain, n=60_000)
    g = profile.drafters[drafter].gamma
    reached = np.array([(accepted >= k).sum() for k in range(g + 1)])
    return reached[1:] / reached[:-1]


def test_conditional_acceptance_shapes_follow_figure_2():
    profile = load_profile("paper-qwen3-4b")
    for domain in ("math", "code", "chat"):
        dflash, eagle3, dspark = (domain_curve(profile, d, domain) for d in ("dflash", "eagle3", "dspark"))
        assert dflash[-1] < dflash[0] - 0.05, f"DFlash decays ({domain})"
        assert eagle3[-1] > eagle3[0] + 0.05, f"Eagle3 rises ({domain})"
        assert abs(dspark[-1] - dspark[0]) < 0.05, f"DSpark stays flat ({domain})"
        assert dspark[0] > max(dflash[0], eagle3[0]), f"DSpark starts highest ({domain})"
        assert dflash[0] > eagle3[0], f"the deep parallel drafter starts above Eagle3 ({domain})"


def test_dspark_confidence_quality_in_figure_6_range():
    profile = load_profile("paper-qwen3-8b")
    conf_raw, acc_raw = sample(profile, "dspark", "chat", n=100_000, calibrated=False, seed=1)
    conf_cal, acc_cal = sample(profile, "dspark", "chat", n=100_000, calibrated=True, seed=1)
    raw = confidence_report(conf_raw, acc_raw)
    cal = confidence_report(conf_cal, acc_cal)
    assert np.all((np.array(raw["auroc"]) > 0.81) & (np.array(raw["auroc"]) < 0.90))
    assert 0.03 <= np.mean(raw["ece"]) <= 0.08
    assert np.mean(cal["ece"]) < 0.015
    assert np.all(np.array(cal["ece"]) < np.array(raw["ece"]))
    # max-probability confidence of a drafter without a head discriminates worse
    conf_mp, acc_mp = sample(profile, "dflash", "chat", n=100_000, calibrated=True, seed=1)
    assert np.mean(confidence_report(conf_mp, acc_mp)["auroc"]) < np.mean(raw["auroc"]) - 0.05


def test_mtp_second_token_acceptance_by_domain():
    profile = load_profile("paper-qwen3-8b")
    for domain, lo, hi in (("math", 0.89, 0.91), ("code", 0.87, 0.89), ("chat", 0.84, 0.86)):
        _, accepted = sample(profile, "mtp", domain, n=100_000)
        assert lo < accepted.mean() < hi


def test_latent_solution_is_exact():
    var = Variation(0.5, 0.4, 2.0)
    target = np.array([0.9, 0.7, 0.95, 0.5])
    assert conditional_acceptance(solve_latent(target, var), var) == pytest.approx(target, abs=1e-8)


def propose_as_arrays(src: ProfileSource, rng: np.random.Generator, ids: np.ndarray):
    """The source's draw written as numpy array expressions (the pre-kernel implementation), drawing the same
    stream: normal-table noise (R, 2 gamma + 1), then uniforms (R, gamma)."""
    from simulator.acceptance.normal_table import standard_normal

    def logistic(x):
        e = np.exp(-x)
        e += 1.0
        return np.reciprocal(e, out=e)

    gamma, var = src.gamma, src.var
    noise = standard_normal(rng, (len(ids), 2 * gamma + 1))
    x = src.state.base.take(ids, axis=0)
    x += var.step_sd * noise[:, :1]
    x += var.token_sd * noise[:, 1 : gamma + 1]
    truth = logistic(x)
    accept = np.zeros((len(ids), gamma + 1), dtype=bool)
    np.less(rng.random((len(ids), gamma)), truth, out=accept[:, :gamma])
    z = x + src.noise_sd * noise[:, gamma + 1 :]
    z *= src.b_over_t
    z += src.state.head.take(ids, axis=0)
    return logistic(z), accept.argmin(axis=1), truth


@pytest.mark.parametrize(("drafter", "gamma", "calibrated"),
                         [("dspark", 7, True), ("dspark", 7, False), ("mtp", 1, True), ("dflash", 9, True)])
def test_compiled_draw_equals_the_array_expressions_bit_for_bit(drafter, gamma, calibrated):
    profile = load_profile("paper-qwen3-8b")
    src = ProfileSource(profile, drafter, gamma, ["math", "code", "chat"], calibrated, np.random.default_rng(3))
    ids = np.arange(400)
    src.attach(ids, ids % 3)
    twin = np.random.default_rng(0)
    twin.bit_generator.state = src.rng.bit_generator.state
    for step in range(5):
        rows = np.sort(np.random.default_rng(step).choice(400, 256, replace=False))
        got = src.propose(rows)
        conf, outcome, truth = propose_as_arrays(src, twin, rows)
        assert np.array_equal(got.confidence, conf) and np.array_equal(got.truth, truth)
        assert np.array_equal(got.outcome, outcome)

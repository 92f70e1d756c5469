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

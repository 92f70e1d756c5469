"""The built-in paper profiles, sampled through the engine's own source, against the paper's Table 1 and figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simulator.core.acceptance.fitting import REFERENCE_OUTPUT
from simulator.core.acceptance.latent import Variation, conditional_acceptance, full_block_tau, solve_latent
from simulator.core.acceptance.pooled import lognormal_output_pmf, pooled_tau
from simulator.core.acceptance.profile import PROFILE_DIR, ProfileSource, load_profile
from simulator.core.calibration import confidence_report
from tests.simulator.engine_helpers import simulate

TABLE1 = pd.read_csv(PROFILE_DIR / "paper-table1.csv")
BENCHMARKS = [c for c in TABLE1.columns if c not in ("target", "drafter")]
TARGETS = sorted(TABLE1.target.unique())
STEPS = 30_000


def sample(profile, drafter: str, key: str, n: int = STEPS, calibrated: bool = True, seed: int = 0):
    """n request-steps of full-block verification through ProfileSource, one request per step."""
    src = ProfileSource.of(profile, drafter=drafter, gamma=profile.drafters[drafter].gamma, mix=[key],
                           calibrated=calibrated, rng=np.random.default_rng(seed))
    ids = np.arange(n)
    src.attach(ids, np.zeros(n, dtype=np.int64))
    prop = src.propose(ids)
    accepted = src.verify(prop, np.full(n, src.gamma))
    return prop.confidence, accepted


# Table 1 as a serving run measures it (runs.csv tau): static-7 on one benchmark, closed loop, pooled over every
# request-step in the window, with the output lengths the profiles were fitted for (fitting.REFERENCE_OUTPUT).
# 256 users on one replica. The closed loop starts with every request fresh, which reads high until the hard,
# long requests have piled up to their steady share: a 20 s warm-up (~330 steps) leaves little of that, and the
# 30 s window holds ~130k request-steps (sampling error ~0.4% of tau).
ENGINE_CONCURRENCY = 256


def engine_tau(scenario_file, target: str, drafter: str, bench: str) -> float:
    median, sigma, cap = REFERENCE_OUTPUT
    path = scenario_file(
        engine={"max_running": ENGINE_CONCURRENCY, "max_batch_tokens": 8 * ENGINE_CONCURRENCY, "prefill": "disaggregated"},
        acceptance={"source": "profile", "profile": f"paper-{target}"},
        drafter={"name": drafter, "gamma": 7},
        systems=["static-7"],
        workload={"mix": {bench: 1}, "prompt": 64, "output": {"dist": "lognormal", "median": median, "sigma": sigma, "max": cap}},
        frontier={"concurrency": [ENGINE_CONCURRENCY]},
        run={"duration_s": 50.0, "warmup_s": 20.0},
    )
    row, _ = simulate(path)
    return row["tau"]


def paper(target: str, drafter: str, bench: str) -> float:
    return float(TABLE1[(TABLE1.target == target) & (TABLE1.drafter == drafter)].iloc[0][bench])


@pytest.mark.parametrize("target", TARGETS)
def test_pooled_tau_of_every_cell_matches_table_1(target):
    """The profile files, read back, give each Table 1 cell as the pooled tau (quadrature, no sampling)."""
    profile = load_profile(f"paper-{target}")
    decoded = lognormal_output_pmf(*REFERENCE_OUTPUT)
    for drafter in ("dspark", "dflash", "eagle3"):
        d = profile.drafters[drafter]
        taus = pooled_tau(d.mu, profile.variation, decoded)
        for bench, tau in zip(d.benchmarks, taus, strict=True):
            assert tau == pytest.approx(paper(target, drafter, bench), rel=1e-4), f"{target}/{drafter}/{bench}"
            # pooling weighs hard requests by their steps: below the mean over request-steps of fresh requests
            assert tau < full_block_tau(d.conditional[d.benchmarks.index(bench)]) - 0.01


def test_pooled_tau_matches_a_brute_force_closed_loop():
    """pooled_tau against requests run to their length through ProfileSource, full block capped at what remains."""
    profile = load_profile("paper-qwen3-4b")
    rng = np.random.default_rng(3)
    src = ProfileSource.of(profile, drafter="eagle3", gamma=7, mix=["aime25"], calibrated=True, rng=rng)
    n = 6000
    ids = np.arange(n)
    src.attach(ids, np.zeros(n, dtype=np.int64))
    decoded = lognormal_output_pmf(200, 0.7, 600)
    remaining = rng.choice(len(decoded), n, p=decoded)
    steps = tokens = 0
    alive = ids[remaining > 0]
    while len(alive):
        gained = src.verify(src.propose(alive), np.minimum(7, remaining[alive] - 1)) + 1
        remaining[alive] -= gained
        steps, tokens = steps + len(alive), tokens + int(gained.sum())
        alive = alive[remaining[alive] > 0]
    d = profile.drafters["eagle3"]
    expected = pooled_tau(d.mu[d.benchmarks.index("aime25")], profile.variation, decoded)
    assert tokens / steps == pytest.approx(expected, rel=0.006)


# the cells the per-request fit got worst (Eagle3/AIME25, DSpark/Arena-Hard on Qwen3-4B), and one per other target
ENGINE_CELLS = [("qwen3-4b", "eagle3", "aime25"), ("qwen3-4b", "dspark", "arena-hard"),
                ("qwen3-8b", "dflash", "mt-bench"), ("gemma4-12b", "dspark", "livecodebench")]


@pytest.mark.parametrize("cell", ENGINE_CELLS, ids=["/".join(c) for c in ENGINE_CELLS])
def test_runs_csv_tau_reproduces_table_1(scenario_file, cell):
    assert engine_tau(scenario_file, *cell) == pytest.approx(paper(*cell), rel=0.02)


@pytest.mark.heavy
@pytest.mark.parametrize("target", TARGETS)
def test_runs_csv_tau_reproduces_table_1_in_every_cell(scenario_file, target):
    """All 27 cells of a target through the engine: each within 2%, the mean signed error within 0.5%."""
    errors = []
    for drafter in ("dspark", "dflash", "eagle3"):
        for bench in BENCHMARKS:
            tau = engine_tau(scenario_file, target, drafter, bench)
            errors.append(tau / paper(target, drafter, bench) - 1)
            assert abs(errors[-1]) < 0.02, f"{target}/{drafter}/{bench}: {tau:.3f} ({errors[-1]:+.1%})"
    assert abs(np.mean(errors)) < 0.005


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
    stream: normal-table noise (R, 2 gamma + 1), then uniforms (R, gamma).

    exp is the C library's (``math.exp``, which the compiled kernel calls too), not ``np.exp``: on CPUs with
    AVX-512 numpy's vectorised exp differs from it in the last bit for a few percent of arguments, so the array
    expressions' numbers depended on the CPU; the kernel's do not."""
    from tests.simulator.test_normal_table import standard_normal

    libm_exp = np.vectorize(math.exp, otypes=[np.float64])

    def logistic(x):
        e = libm_exp(-x)
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
    src = ProfileSource.of(profile, drafter=drafter, gamma=gamma, mix=["math", "code", "chat"], calibrated=calibrated,
                           rng=np.random.default_rng(3))
    ids = np.arange(400)
    src.attach(ids, ids % 3)
    twin = np.random.default_rng(0)
    twin.bit_generator.state = src.rng.bit_generator.state
    for step in range(5):
        rows = np.sort(np.random.default_rng(step).choice(400, 256, replace=False))
        got = src.propose(rows)
        conf, outcome, _ = propose_as_arrays(src, twin, rows)
        assert np.array_equal(got.confidence, conf) and np.array_equal(got.outcome, outcome)

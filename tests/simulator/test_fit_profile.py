"""`simulate fit-profile`: a profile fitted to a trace reproduces the trace's acceptance, and replaying the fitted
profile gives back the trace's tau."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.core.acceptance.fitting import VARIATION
from simulator.core.acceptance.latent import HeadModel, Variation, conditional_acceptance, sample_blocks
from simulator.core.acceptance.profile import ProfileSource, load_profile
from simulator.core.acceptance.trace_fit import (
    between_request_share,
    conditional_from_accepted,
    deployed_temperatures,
    fit_profile_file,
)
from simulator.core.calibration import confidence_report, sts_apply

ROOT = Path(__file__).resolve().parents[2]
MU = {"math": np.array([2.5, 2.2, 2.0, 1.8, 1.5]), "chat": np.array([0.8, 0.6, 0.5, 0.4, 0.3])}


def synthetic_trace(path: Path, n: int = 30_000, bias: dict[str, float] | None = None,
                    temperatures: np.ndarray | None = None) -> pd.DataFrame:
    """Blocks drawn from the latent model with a known head: ``bias`` shifts a domain's raw logit, and the policy
    saw the raw confidences scaled by ``temperatures`` (none: the raw ones)."""
    rng = np.random.default_rng(0)
    frames = []
    for domain, mu in MU.items():
        head_bias = np.full(5, (bias or {}).get(domain, 0.0))
        raw, acc = sample_blocks(mu, VARIATION, HeadModel(noise_sd=1.0, sharpness=1.3), n, rng, head_bias=head_bias)
        seen = raw if temperatures is None else sts_apply(raw, temperatures)
        df = pd.DataFrame({"domain": domain, "benchmark": f"{domain}-bench", "drafter": "dspark", "gamma": 5,
                           "accepted": acc})
        for j in range(5):
            df[f"c_{j + 1}"] = seen[:, j]
        for j in range(5):
            df[f"raw_{j + 1}"] = raw[:, j]
        frames.append(df)
    out = pd.concat(frames)
    out.to_csv(path, index=False)
    return out


def test_conditional_from_accepted_counts_survivors():
    # 4 blocks: accepted 0, 1, 2, 2 of gamma 2 -> p1 = 3/4, p2 = 2/3
    assert conditional_from_accepted(np.array([0, 1, 2, 2]), 2) == pytest.approx([0.75, 2 / 3])


@pytest.mark.slow
def test_fitted_profile_reproduces_the_trace(tmp_path):
    trace = synthetic_trace(tmp_path / "trace.csv")
    fit_profile_file(tmp_path / "trace.csv", tmp_path / "fit.yaml")
    prof = load_profile(str(tmp_path / "fit.yaml"))
    d = prof.drafters["dspark"]
    for domain, mu in MU.items():
        i = d.benchmarks.index(domain)
        # the latent the trace was drawn from, recovered through its observed conditional rates
        assert d.conditional[i] == pytest.approx(conditional_acceptance(mu, VARIATION), abs=0.02)
        tau_trace = 1 + trace[trace.domain == domain]["accepted"].mean()
        assert d.tau[i] == pytest.approx(tau_trace, rel=1e-6)
    # replaying the fitted profile (full blocks) gives the trace's tau back
    src = ProfileSource.of(prof, drafter="dspark", gamma=5, mix=["math", "chat"], calibrated=True,
                           rng=np.random.default_rng(1))
    ids = np.arange(20_000)
    src.attach(ids, np.repeat([0, 1], 10_000))
    acc = src.verify(src.propose(ids), np.full(20_000, 5))
    for k, domain in enumerate(MU):
        tau_trace = 1 + trace[trace.domain == domain]["accepted"].mean()
        assert 1 + acc[k * 10_000:(k + 1) * 10_000].mean() == pytest.approx(tau_trace, rel=0.03)
    # the head: the synthetic one has no domain bias and no temperatures, and its discrimination within a domain
    # is recovered
    assert np.abs(d.head_bias).max() < 0.3
    assert np.array_equal(d.sts_temperatures, np.ones(5))
    head = d.head
    for domain, mu in MU.items():
        part = trace[trace.domain == domain]
        want = np.mean(confidence_report(part[[f"raw_{j}" for j in range(1, 6)]].to_numpy(), part["accepted"])["auroc"])
        raw, acc = sample_blocks(mu, VARIATION, head, 20_000, np.random.default_rng(2),
                                 head_bias=d.head_bias[d.benchmarks.index(domain)])
        assert np.mean(confidence_report(raw, acc)["auroc"]) == pytest.approx(want, abs=0.03)


@pytest.mark.slow
def test_fit_recovers_a_domain_biased_head_and_the_deployed_temperatures(tmp_path):
    """A head more confident on chat than its acceptance warrants, calibrated by known temperatures: the fit keeps
    those temperatures, and a replay's policy sees each domain's confidences as the trace's did."""
    temps = np.array([1.6, 1.3, 1.1, 1.0, 0.9])
    trace = synthetic_trace(tmp_path / "trace.csv", n=20_000, bias={"chat": 1.5}, temperatures=temps)
    fit_profile_file(tmp_path / "trace.csv", tmp_path / "fit.yaml")
    prof = load_profile(str(tmp_path / "fit.yaml"))
    d = prof.drafters["dspark"]
    assert d.sts_temperatures == pytest.approx(temps, abs=1e-6)
    # the bias lands on chat (its size in logits depends on the sharpness the grid picks)
    gap = d.head_bias[d.benchmarks.index("chat")] - d.head_bias[d.benchmarks.index("math")]
    assert (gap > 0.5).all()
    src = ProfileSource.of(prof, drafter="dspark", gamma=5, mix=["math", "chat"], calibrated=True,
                           rng=np.random.default_rng(1))
    ids = np.arange(20_000)
    src.attach(ids, np.repeat([0, 1], 10_000))
    seen = src.propose(ids).confidence
    for k, domain in enumerate(MU):
        want = trace[trace.domain == domain][[f"c_{j}" for j in range(1, 6)]].to_numpy().mean(axis=0)
        assert seen[k * 10_000:(k + 1) * 10_000].mean(axis=0) == pytest.approx(want, abs=0.03)


def test_deployed_temperatures_only_for_temperature_scaled_confidences():
    rng = np.random.default_rng(0)
    raw = rng.uniform(0.05, 0.95, (500, 3))
    temps = np.array([2.0, 1.5, 0.8])
    assert deployed_temperatures(raw, sts_apply(raw, temps)) == pytest.approx(temps)
    assert deployed_temperatures(raw, raw) == pytest.approx(np.ones(3))
    assert deployed_temperatures(raw, np.clip(raw + 0.05, 0, 1)) is None  # not a temperature scaling
    assert deployed_temperatures(raw, np.full((500, 3), np.nan)) is None  # the trace recorded no calibrated ones


@pytest.mark.slow
def test_fit_profile_cli_bad_input_is_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-c", "from simulator.cli import main; main()", "fit-profile",
                          str(tmp_path / "none.csv"), "--out", str(tmp_path / "p.yaml")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 2 and "not found" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


SERVED_MU = {"math": np.array([1.5, 1.3, 1.2, 1.0, 0.9]), "chat": np.array([0.8, 0.6, 0.5, 0.4, 0.3])}
SERVED_SD = {"math": 2.0, "chat": 0.5}
SERVED_TOKENS = 40


def served_blocks(mu: np.ndarray, request_sd: float, requests: int, rng: np.random.Generator) -> pd.DataFrame:
    """Requests as a serving run decodes them: each has its own effect u ~ N(0, request_sd^2) and verifies full
    blocks until it has emitted SERVED_TOKENS tokens, one row per request-step, so a hard request has more rows."""
    u = rng.normal(0.0, request_sd, requests)
    emitted = np.zeros(requests, dtype=np.int64)
    frames = []
    while (active := np.flatnonzero(emitted < SERVED_TOKENS)).size:
        raw, acc = sample_blocks(mu, VARIATION, HeadModel(noise_sd=1.0, sharpness=1.3), len(active), rng,
                                 request_effect=u[active])
        emitted[active] += acc + 1
        frames.append(pd.DataFrame({"request": active, "accepted": acc, **{f"raw_{j + 1}": raw[:, j] for j in range(5)}}))
    return pd.concat(frames, ignore_index=True)


def served_trace(path: Path, requests: int = 1500) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    frames = []
    for k, (domain, mu) in enumerate(SERVED_MU.items()):
        df = served_blocks(mu, SERVED_SD[domain], requests, rng)
        df["request"] += k * requests
        frames.append(df.assign(domain=domain, benchmark=f"{domain}-bench", drafter="dspark", gamma=5))
    out = pd.concat(frames, ignore_index=True)
    for j in range(1, 6):
        out[f"c_{j}"] = out[f"raw_{j}"]
    out.to_csv(path, index=False)
    return out


def replay_served(prof, domain: str, requests: int = 3000) -> pd.DataFrame:
    """The fitted profile decoding requests as ``served_blocks`` does (full blocks to SERVED_TOKENS tokens)."""
    src = ProfileSource.of(prof, drafter="dspark", gamma=5, mix=[domain], calibrated=False,
                           rng=np.random.default_rng(4))
    ids = np.arange(requests)
    src.attach(ids, np.zeros(requests, dtype=np.int64))
    emitted = np.zeros(requests, dtype=np.int64)
    frames = []
    while (active := ids[emitted < SERVED_TOKENS]).size:
        p = src.propose(active)
        emitted[active] += p.outcome + 1
        frames.append(pd.DataFrame({"request": active, "accepted": p.outcome,
                                    "expected": np.cumprod(p.confidence, axis=1).sum(axis=1)}))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.heavy
def test_fit_recovers_how_much_requests_differ_and_replays_the_served_tau(tmp_path):
    """Math's requests differ widely in difficulty (request effect sd 2, chat's 0.5): the fit recovers each
    domain's spread from the trace's request ids, and a replay of the fitted profile, decoding requests as the
    trace's were, gives back the trace's tau (pooled over request-steps, where hard requests weigh more), its
    between-request share of the accepted length's variance and how well the head's confidences tell long
    blocks from short ones. With the built-ins' spread for every domain, the replay's math blocks all look alike
    to the head and the between-request share comes out near a quarter of the trace's."""
    trace = served_trace(tmp_path / "trace.csv")
    fit_profile_file(tmp_path / "trace.csv", tmp_path / "fit.yaml")
    d = load_profile(str(tmp_path / "fit.yaml")).drafters["dspark"]
    assert d.request_sd[d.benchmarks.index("math")] == pytest.approx(2.0, abs=0.3)
    assert d.request_sd[d.benchmarks.index("chat")] == pytest.approx(0.5, abs=0.3)
    # a fresh request's conditional acceptance is recovered, although the trace's rows over-represent hard ones
    for domain, mu in SERVED_MU.items():
        i = d.benchmarks.index(domain)
        fresh = conditional_acceptance(mu, Variation(SERVED_SD[domain], VARIATION.step_sd, VARIATION.token_sd))
        fitted = conditional_acceptance(d.mu[i], Variation(d.request_sd[i], VARIATION.step_sd, VARIATION.token_sd))
        assert fitted == pytest.approx(fresh, abs=0.03)
    rows = trace[trace.domain == "math"]["accepted"].to_numpy()
    assert d.conditional[d.benchmarks.index("math")] == pytest.approx(conditional_from_accepted(rows, 5), abs=1e-6)
    prof = load_profile(str(tmp_path / "fit.yaml"))
    math = trace[trace.domain == "math"]
    sim = replay_served(prof, "math")
    assert 1 + sim.accepted.mean() == pytest.approx(1 + math.accepted.mean(), rel=0.03)
    want_share = between_request_share(math.accepted.to_numpy(), math.request.to_numpy())
    assert between_request_share(sim.accepted.to_numpy(), sim.request.to_numpy()) == pytest.approx(want_share, abs=0.05)
    want_corr = np.corrcoef(np.cumprod(math[[f"raw_{j}" for j in range(1, 6)]].to_numpy(), axis=1).sum(axis=1),
                            math.accepted)[0, 1]
    assert np.corrcoef(sim.expected, sim.accepted)[0, 1] == pytest.approx(want_corr, abs=0.06)
    # the same profile with every request drawn at the built-ins' spread: requests alike, blocks alike
    prof.drafters["dspark"].request_sd = None
    alike = replay_served(prof, "math")
    assert between_request_share(alike.accepted.to_numpy(), alike.request.to_numpy()) < 0.5 * want_share


def test_between_request_share_counts_every_request_once():
    # two requests: one of 3 blocks accepting 0, one of 1 block accepting 4; request means 0 and 4, no spread
    # within either: all the variance lies between them, whatever their step counts
    assert between_request_share(np.array([0, 0, 0, 4]), np.array([7, 7, 7, 9])) == pytest.approx(1.0)
    assert between_request_share(np.array([0, 4, 0, 4]), np.array([1, 1, 2, 2])) == pytest.approx(0.0)


def test_latent_solved_for_served_blocks():
    """The served solve reproduces the rows' conditional acceptance under a serving run's step weights; with no
    spread between requests every request weighs alike and it is the fresh-request solve; with a wide spread a
    fresh request accepts more than the rows, which lean towards the hard requests' many steps."""
    from simulator.core.acceptance.latent import full_block_tau, solve_latent
    from simulator.core.acceptance.pooled import served_conditional, solve_latent_served

    rows = np.array([0.47, 0.58, 0.73, 0.77, 0.82])
    alike = Variation(0.0, VARIATION.step_sd, VARIATION.token_sd)
    mu, _ = solve_latent_served(rows, alike, tokens_per_step=2.5)
    assert mu == pytest.approx(solve_latent(rows, alike), abs=1e-6)
    wide = Variation(2.5, VARIATION.step_sd, VARIATION.token_sd)
    mu, depth = solve_latent_served(rows, wide, tokens_per_step=1.8)
    assert 0.0 < depth < 5.0
    assert served_conditional(mu, wide, depth) == pytest.approx(rows, abs=1e-4)
    assert full_block_tau(conditional_acceptance(mu, wide)) > full_block_tau(rows) + 0.3

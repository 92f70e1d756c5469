"""`simulate fit-profile`: a profile fitted to a trace reproduces the trace's acceptance, and replaying the fitted
profile gives back the trace's tau."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.acceptance.fitting import VARIATION
from simulator.acceptance.latent import HeadModel, conditional_acceptance, sample_blocks
from simulator.acceptance.profile import ProfileSource, load_profile
from simulator.acceptance.trace_fit import conditional_from_accepted, fit_profile_file

ROOT = Path(__file__).resolve().parents[2]
MU = {"math": np.array([2.5, 2.2, 2.0, 1.8, 1.5]), "chat": np.array([0.8, 0.6, 0.5, 0.4, 0.3])}


def synthetic_trace(path: Path, n: int = 30_000) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frames = []
    for domain, mu in MU.items():
        raw, acc = sample_blocks(mu, VARIATION, HeadModel(noise_sd=1.0, sharpness=1.3), n, rng)
        df = pd.DataFrame({"domain": domain, "benchmark": f"{domain}-bench", "drafter": "dspark", "gamma": 5,
                           "accepted": acc})
        for j in range(5):
            df[f"c_{j + 1}"] = raw[:, j]
        for j in range(5):
            df[f"raw_{j + 1}"] = raw[:, j]
        frames.append(df)
    out = pd.concat(frames)
    out.to_csv(path, index=False)
    return out


def test_conditional_from_accepted_counts_survivors():
    # 4 blocks: accepted 0, 1, 2, 2 of gamma 2 -> p1 = 3/4, p2 = 2/3
    assert conditional_from_accepted(np.array([0, 1, 2, 2]), 2) == pytest.approx([0.75, 2 / 3])


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
    src = ProfileSource(prof, "dspark", 5, ["math", "chat"], True, np.random.default_rng(1))
    ids = np.arange(20_000)
    src.attach(ids, np.repeat([0, 1], 10_000))
    acc = src.verify(src.propose(ids), np.full(20_000, 5))
    for k, domain in enumerate(MU):
        tau_trace = 1 + trace[trace.domain == domain]["accepted"].mean()
        assert 1 + acc[k * 10_000:(k + 1) * 10_000].mean() == pytest.approx(tau_trace, rel=0.03)
    # the head: discrimination close to the trace's
    q = d.quality
    assert np.mean(q["raw_auroc"]) == pytest.approx(q["trace_raw_auroc"], abs=0.05)


def test_fit_profile_cli_bad_input_is_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-c", "from simulator.cli import main; main()", "fit-profile",
                          str(tmp_path / "none.csv"), "--out", str(tmp_path / "p.yaml")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 2 and "not found" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1

"""Fit an acceptance profile to a recorded trace: ``simulate fit-profile TRACE --out PROFILE.yaml``.

The loop observe -> replay -> calibrate: a live run (or ``dspark eval``) records full-block verifications in the
trace format; this turns them into the statistical model of ``latent.py`` that ``source: profile`` samples, with
the same pieces the built-in ``paper-*`` profiles are made of (``fitting.py``):

- per drafter and per mix key (each domain, pooled over its benchmarks, and each benchmark on its own), the
  observed position-wise conditional acceptance p_j = #(accepted >= j) / #(accepted >= j - 1), from which
  ``solve_latent`` gives the latent means mu exactly (so the full-block tau of the trace is reproduced);
- the confidence head (drafters that recorded raw confidences): observation noise and sharpness chosen on a grid so
  that blocks simulated from the fitted model have the trace's mean raw AUROC and raw ECE; STS temperatures fitted
  on those simulated blocks, as for the built-in profiles. A drafter without a head gets the built-in max-prob
  head model.

The variation (request, step and token spread of the latent) is the built-in profiles' (``fitting.VARIATION``).
Domain keys map to themselves in the profile's ``domains`` table, so a mix entry naming a domain draws the pooled
fit, as a live run draws prompts of that domain regardless of benchmark.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.acceptance.fitting import HEADS, VARIATION
from simulator.acceptance.latent import HeadModel, conditional_acceptance, sample_blocks, solve_latent
from simulator.acceptance.trace import read_trace
from simulator.calibration import confidence_report, sts_apply, sts_fit
from simulator.errors import UserError

NOISE_GRID = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 9.0, 14.0)
SHARPNESS_GRID = (0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 2.5)
HEAD_SAMPLES = 20_000
MIN_RATE, MAX_RATE = 1e-3, 1 - 1e-3


def conditional_from_accepted(accepted: np.ndarray, gamma: int) -> np.ndarray:
    """p_j = share of blocks accepting token j among those that accepted 1..j-1 (j = 1..gamma), clipped into
    (0, 1); a position no block reached repeats the previous rate."""
    acc = np.asarray(accepted)
    out = np.empty(gamma)
    prev = 0.5
    for j in range(1, gamma + 1):  # positions, a handful
        reached = int((acc >= j - 1).sum())
        prev = float(np.clip((acc >= j).sum() / reached, MIN_RATE, MAX_RATE)) if reached else prev
        out[j - 1] = prev
    return out


def _round(values) -> list[float]:
    return [round(float(v), 6) for v in np.atleast_1d(values)]


def _mean_quality(raw: np.ndarray, accepted: np.ndarray) -> tuple[float, float]:
    rep = confidence_report(raw, accepted)
    return float(np.nanmean(rep["auroc"])), float(np.nanmean(rep["ece"]))


def fit_head(mu: np.ndarray, weights: np.ndarray, raw: np.ndarray, accepted: np.ndarray,
             rng: np.random.Generator) -> tuple[HeadModel, dict]:
    """The (noise_sd, sharpness) of the grid whose simulated blocks come closest to the trace's mean raw AUROC and
    raw ECE. mu: (keys, gamma), weights: (keys,) each key's share of the trace's blocks."""
    want_auroc, want_ece = _mean_quality(raw, accepted)
    pick = rng.choice(len(mu), size=HEAD_SAMPLES, p=weights)
    best = None
    for noise in NOISE_GRID:
        for sharp in SHARPNESS_GRID:
            head = HeadModel(noise_sd=noise, sharpness=sharp)
            sim_raw, sim_acc = sample_blocks(mu[pick], VARIATION, head, HEAD_SAMPLES, np.random.default_rng(7))
            a, e = _mean_quality(sim_raw, sim_acc)
            err = (a - want_auroc) ** 2 + (e - want_ece) ** 2
            if best is None or err < best[0]:
                best = (err, head)
    return best[1], {"trace_raw_auroc": round(want_auroc, 6), "trace_raw_ece": round(want_ece, 6)}


def fit_trace_profile(df: pd.DataFrame, name: str, source: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    domain_of: dict[str, str] = {}
    drafters = {}
    for drafter in sorted(df["drafter"].astype(str).unique()):
        rows = df[df["drafter"].astype(str) == drafter]
        gamma = int(rows["gamma"].max())
        acc = np.minimum(rows["accepted"].to_numpy(dtype=np.int64), gamma)
        domains = rows["domain"].astype(str).to_numpy()
        benches = rows["benchmark"].astype(str).to_numpy()
        keys: dict[str, np.ndarray] = {}
        for d in sorted(set(domains)):
            keys[d] = domains == d
            domain_of[d] = d
        for b in sorted(set(benches) - set(domains)):
            keys[b] = benches == b
            domain_of[b] = str(domains[benches == b][0])
        entries, mus, counts = {}, [], []
        for key, sel in keys.items():
            cond = conditional_from_accepted(acc[sel], gamma)
            mu = solve_latent(cond, VARIATION)
            entries[key] = {"tau": round(float(1 + np.cumprod(cond).sum()), 6), "conditional": _round(cond),
                            "mu": _round(mu), "blocks": int(sel.sum())}
            if key in set(domains):
                mus.append(mu)
                counts.append(int(sel.sum()))
        raw_cols = [f"raw_{j}" for j in range(1, gamma + 1)]
        has_raw = all(c in rows.columns for c in raw_cols) and not rows[raw_cols].isna().any().any()
        entry: dict = {"gamma": gamma}
        if has_raw:
            raw = np.clip(rows[raw_cols].to_numpy(dtype=float), 1e-6, 1 - 1e-6)
            w = np.array(counts, dtype=float)
            head, seen = fit_head(np.array(mus), w / w.sum(), raw, acc, rng)
            entry["head"] = {"kind": "confidence-head", "noise_sd": head.noise_sd, "sharpness": head.sharpness}
            sim_raw, sim_acc = sample_blocks(np.array(mus)[rng.choice(len(mus), HEAD_SAMPLES, p=w / w.sum())],
                                             VARIATION, head, HEAD_SAMPLES, rng)
            half = HEAD_SAMPLES // 2
            temps = sts_fit(sim_raw[:half], sim_acc[:half])
            entry["sts_temperatures"] = _round(temps)
            before = confidence_report(sim_raw[half:], sim_acc[half:])
            after = confidence_report(sts_apply(sim_raw[half:], temps), sim_acc[half:])
            entry["quality"] = {**seen, "raw_auroc": _round(before["auroc"]), "raw_ece": _round(before["ece"]),
                                "calibrated_ece": _round(after["ece"])}
        else:
            kind, head = HEADS["dflash"]
            entry["head"] = {"kind": kind, "noise_sd": head.noise_sd, "sharpness": head.sharpness}
            entry["quality"] = {}
        for e in entries.values():  # solve_latent is exact; rounding to 6 digits must not undo it
            assert np.allclose(conditional_acceptance(np.array(e["mu"]), VARIATION), e["conditional"], atol=1e-4)
        entry["benchmarks"] = entries
        drafters[drafter] = entry
    return {
        "name": name,
        "target": "",
        "description": (f"Fitted to the acceptance trace {source} ({len(df)} request-steps) by "
                        "`simulate fit-profile`: conditional acceptance per domain and benchmark, confidence head "
                        "matched to the trace's raw AUROC and ECE."),
        "variation": {"request_sd": VARIATION.request_sd, "step_sd": VARIATION.step_sd, "token_sd": VARIATION.token_sd},
        "domains": domain_of,
        "drafters": drafters,
    }


def fit_profile_file(trace: Path, out: Path) -> dict:
    from hw_profile.files import atomic_write_text

    df = read_trace(Path(trace))
    if df.empty:
        raise UserError(f"{trace}: the trace has no rows")
    profile = fit_trace_profile(df, Path(out).stem, str(trace))
    text = "# " + profile["description"] + "\n" + yaml.safe_dump(profile, sort_keys=False, width=120,
                                                                  default_flow_style=None)
    atomic_write_text(out, text)
    return profile

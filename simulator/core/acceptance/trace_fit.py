"""Fit an acceptance profile to a recorded trace: ``simulate fit-profile TRACE --out PROFILE.yaml``.

The loop observe -> replay -> calibrate: a live run (or ``dspark eval``) records full-block verifications in the
trace format; this turns them into the statistical model of ``latent.py`` that ``source: profile`` samples, with
the same pieces the built-in ``paper-*`` profiles are made of (``fitting.py``):

- per drafter and per mix key (each domain, pooled over its benchmarks, and each benchmark on its own), the
  observed position-wise conditional acceptance p_j = #(accepted >= j) / #(accepted >= j - 1), from which
  ``solve_latent`` gives the latent means mu exactly (so the full-block tau of the trace is reproduced);
- the confidence head (drafters that recorded raw confidences): a raw-logit bias per mix key and position
  (``head_bias``) so that simulated blocks have the trace's mean raw confidence per key and position (a real
  head's miscalibration differs by domain: the tiny world's is most overconfident on math), and the observation
  noise and sharpness chosen on a grid so that blocks simulated with those biases have the trace's raw AUROC
  and raw ECE within each domain; the STS temperatures are those the trace's confidences were calibrated with
  (recovered from its raw and calibrated columns, so a replay's policy sees confidences calibrated as the
  recorded run's were), or, for a trace without them, fitted on those simulated blocks as for the built-in
  profiles. A drafter without a head gets the built-in max-prob head model.

The variation (request, step and token spread of the latent) is the built-in profiles' (``fitting.VARIATION``).
Domain keys map to themselves in the profile's ``domains`` table, so a mix entry naming a domain draws the pooled
fit, as a live run draws prompts of that domain regardless of benchmark.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.core.acceptance.ends import fit_ends
from simulator.core.acceptance.fitting import HEADS, VARIATION
from simulator.core.acceptance.latent import HeadModel, conditional_acceptance, sample_blocks, solve_latent
from simulator.core.acceptance.trace import read_trace, recorded_ends
from simulator.core.calibration import confidence_report, logit, sts_apply, sts_fit
from simulator.errors import UserError

NOISE_GRID = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 9.0, 14.0)
SHARPNESS_GRID = (0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 2.5)
HEAD_SAMPLES = 20_000
GRID_BIAS_SAMPLES = 4_000  # per key and round while searching the grid; the chosen head's biases use HEAD_SAMPLES
BIAS_ROUNDS = 4
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


def fit_head_bias(mu: np.ndarray, head: HeadModel, mean_raw: np.ndarray, samples: int = HEAD_SAMPLES,
                  rounds: int = BIAS_ROUNDS) -> np.ndarray:
    """Raw-logit biases (keys, gamma) under which blocks simulated from mu (keys, gamma) have the mean raw
    confidences mean_raw (keys, gamma): a fixed-point iteration on the logit gap, with the same draws each round."""
    mean_raw = np.clip(mean_raw, MIN_RATE, MAX_RATE)
    bias = np.zeros_like(mu)
    for _ in range(rounds):
        for k in range(len(mu)):
            sim_raw, _ = sample_blocks(mu[k], VARIATION, head, samples, np.random.default_rng(11), head_bias=bias[k])
            bias[k] += logit(mean_raw[k]) - logit(np.clip(sim_raw.mean(axis=0), MIN_RATE, MAX_RATE))
    return bias


def _within_key_quality(raw: np.ndarray, accepted: np.ndarray, key: np.ndarray, weights: np.ndarray
                        ) -> tuple[float, float]:
    """Mean raw AUROC and ECE within each key (key (n,) its index), averaged with the keys' weights: with each
    key's bias fitted, this is what the head's noise and sharpness still have to match (pooled, the differences
    between keys would count as discrimination)."""
    quality = np.array([_mean_quality(raw[key == k], accepted[key == k]) for k in range(len(weights))])
    return tuple(np.nansum(quality * weights[:, None], axis=0) / weights.sum())


def fit_head(mu: np.ndarray, weights: np.ndarray, mean_raw: np.ndarray, raw: np.ndarray, accepted: np.ndarray,
             key: np.ndarray, rng: np.random.Generator) -> tuple[HeadModel, dict]:
    """The (noise_sd, sharpness) of the grid whose simulated blocks, with each key's raw-logit bias fitted to its
    mean raw confidences (``fit_head_bias``), come closest to the trace's raw AUROC and raw ECE within keys. mu,
    mean_raw: (keys, gamma); weights: (keys,) each key's share of the trace's blocks; raw, accepted: the trace's
    blocks, key (n,) the index of each block's key."""
    want_auroc, want_ece = _within_key_quality(raw, accepted, key, weights)
    pick = rng.choice(len(mu), size=HEAD_SAMPLES, p=weights)
    best = None
    for noise in NOISE_GRID:
        for sharp in SHARPNESS_GRID:
            head = HeadModel(noise_sd=noise, sharpness=sharp)
            bias = fit_head_bias(mu, head, mean_raw, samples=GRID_BIAS_SAMPLES)
            sim_raw, sim_acc = sample_blocks(mu[pick], VARIATION, head, HEAD_SAMPLES, np.random.default_rng(7),
                                             head_bias=bias[pick])
            a, e = _within_key_quality(sim_raw, sim_acc, pick, weights)
            err = (a - want_auroc) ** 2 + (e - want_ece) ** 2
            if best is None or err < best[0]:
                best = (err, head)
    return best[1], {"trace_raw_auroc_within_domain": round(float(want_auroc), 6),
                     "trace_raw_ece_within_domain": round(float(want_ece), 6)}


def deployed_temperatures(raw: np.ndarray, calibrated: np.ndarray, tolerance: float = 1e-3) -> np.ndarray | None:
    """The STS temperatures (gamma,) the trace's policy saw its confidences through, when ``calibrated`` is
    ``raw`` temperature-scaled per position (logit c = logit raw / T on every row, within ``tolerance``), else
    None. The fitted profile keeps them: a replay's policy then sees confidences calibrated as the recorded
    run's were, rather than by temperatures refitted to the model."""
    if not np.isfinite(calibrated).all():
        return None
    zr, zc = logit(raw), logit(np.clip(calibrated, 1e-6, 1 - 1e-6))
    usable = np.abs(zc) > 0.05  # near 1/2 the ratio is ill-conditioned
    if not usable.any(axis=0).all():
        return None
    temps = np.array([np.median(zr[usable[:, j], j] / zc[usable[:, j], j]) for j in range(raw.shape[1])])
    if not (temps > 0).all() or np.abs(zr / temps - zc)[usable].max() > tolerance * max(1.0, np.abs(zc).max()):
        return None
    return temps


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
        entries, key_mu = {}, {}
        for key, sel in keys.items():
            cond = conditional_from_accepted(acc[sel], gamma)
            key_mu[key] = solve_latent(cond, VARIATION)
            entries[key] = {"tau": round(float(1 + np.cumprod(cond).sum()), 6), "conditional": _round(cond),
                            "mu": _round(key_mu[key]), "blocks": int(sel.sum())}
        domain_keys = sorted(set(domains))
        mus = np.array([key_mu[d] for d in domain_keys])
        w = np.array([entries[d]["blocks"] for d in domain_keys], dtype=float)
        w /= w.sum()
        raw_cols = [f"raw_{j}" for j in range(1, gamma + 1)]
        has_raw = all(c in rows.columns for c in raw_cols) and not rows[raw_cols].isna().any().any()
        entry: dict = {"gamma": gamma}
        if has_raw:
            raw = np.clip(rows[raw_cols].to_numpy(dtype=float), 1e-6, 1 - 1e-6)
            mean_raw = {key: raw[sel].mean(axis=0) for key, sel in keys.items()}
            block_domain = np.searchsorted(np.array(domain_keys), domains)  # each block's index into mus
            head, seen = fit_head(mus, w, np.array([mean_raw[d] for d in domain_keys]), raw, acc, block_domain, rng)
            entry["head"] = {"kind": "confidence-head", "noise_sd": head.noise_sd, "sharpness": head.sharpness}
            bias = dict(zip(keys, fit_head_bias(np.array([key_mu[k] for k in keys]), head,
                                                np.array([mean_raw[k] for k in keys])), strict=True))
            for key, b in bias.items():
                entries[key]["head_bias"] = _round(b)
            domain_bias = np.array([bias[d] for d in domain_keys])
            pick = rng.choice(len(mus), HEAD_SAMPLES, p=w)
            sim_raw, sim_acc = sample_blocks(mus[pick], VARIATION, head, HEAD_SAMPLES, rng,
                                             head_bias=domain_bias[pick])
            half = HEAD_SAMPLES // 2
            c_cols = [f"c_{j}" for j in range(1, gamma + 1)]
            temps = deployed_temperatures(raw, rows[c_cols].to_numpy(dtype=float)) if all(
                c in rows.columns for c in c_cols) else None
            if temps is None:  # the trace's policy saw no temperature-scaled confidences: fit STS on the model
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
    profile = {
        "name": name,
        "target": "",
        "description": (f"Fitted to the acceptance trace {source} ({len(df)} request-steps) by "
                        "`simulate fit-profile`: conditional acceptance per domain and benchmark, confidence head "
                        "matched to the trace's mean raw confidence per key and position, raw AUROC and ECE."),
        "variation": {"request_sd": VARIATION.request_sd, "step_sd": VARIATION.step_sd, "token_sd": VARIATION.token_sd},
        "domains": domain_of,
        "drafters": drafters,
    }
    ends = fit_domain_ends(df)
    if ends:
        profile["ends"] = ends
        profile["description"] += (" Where requests end: an end-token hazard per domain fitted to the recorded "
                                   "requests (ends.fit_ends).")
    return profile


def fit_domain_ends(df: pd.DataFrame) -> dict:
    """Per domain, the end model of the trace's recorded requests (``ends.fit_ends``: a constant or a piecewise
    hazard per position, as the likelihood-ratio test decides, with its fit), for a trace that records where its
    requests ended; {} otherwise. Every drafter's rows describe requests of the same target, so all are pooled
    (a request id is unique per drafter's run)."""
    out = {}
    per_drafter = [recorded_ends(rows) for _, rows in df.groupby(df["drafter"].astype(str), sort=True)]
    if any(e is None for e in per_drafter) or not per_drafter:
        return out
    ends = pd.concat(per_drafter)
    for domain in sorted(ends["domain"].unique()):
        sel = ends[ends["domain"] == domain]
        out[str(domain)] = fit_ends(sel["output"].to_numpy(), sel["eos"].to_numpy())
    # requests run to their drawn length (ignore_eos) leave nothing to end them with: no ends at all
    return out if any(e["kind"] != "none" for e in out.values()) else {}


def fit_profile_file(trace: Path, out: Path) -> dict:
    from atomic_files import atomic_write_text

    df = read_trace(Path(trace))
    if df.empty:
        raise UserError(f"{trace}: the trace has no rows")
    profile = fit_trace_profile(df, Path(out).stem, str(trace))
    text = "# " + profile["description"] + "\n" + yaml.safe_dump(profile, sort_keys=False, width=120,
                                                                  default_flow_style=None)
    atomic_write_text(out, text)
    return profile

"""Fit an acceptance profile to a recorded trace: ``simulate fit-profile TRACE --out PROFILE.yaml``.

The loop observe -> replay -> calibrate: a live run (or ``dspark eval``) records full-block verifications in the
trace format; this turns them into the statistical model of ``latent.py`` that ``source: profile`` samples, with
the same pieces the built-in ``paper-*`` profiles are made of (``fitting.py``):

- per drafter and per mix key (each domain, pooled over its benchmarks, and each benchmark on its own), the
  observed position-wise conditional acceptance p_j = #(accepted >= j) / #(accepted >= j - 1), from which
  ``solve_latent`` gives the latent means mu exactly (so the full-block tau of the trace is reproduced);
- the confidence head (drafters that recorded raw confidences): a raw-logit bias per mix key and position
  (``head_bias``) so that simulated blocks have the trace's mean confidence per key and position as its policy
  saw it (calibrated by the recovered temperatures below, else raw: that is what a replay's policy reads; a real
  head's miscalibration differs by domain: the tiny world's is most overconfident on math), and the observation
  noise and sharpness chosen on a grid so that blocks simulated with those biases have the trace's raw AUROC
  and raw ECE within each domain; the STS temperatures are those the trace's confidences were calibrated with
  (recovered from its raw and calibrated columns, so a replay's policy sees confidences calibrated as the
  recorded run's were), or, for a trace without them, fitted on those simulated blocks as for the built-in
  profiles. A drafter without a head gets the built-in max-prob head model.

How much acceptance varies between requests is fitted per mix key when the trace names each row's request
(a live run's does): a request's latent effect u has its own spread ``request_sd`` per key, chosen so that
blocks simulated for the trace's own requests (their step counts) have the trace's between-request share of the
variance of the accepted length (``fit_request_sd``). A domain whose prompts differ widely in difficulty then
has easy and hard requests, and a head that observes the latent tells them apart, as a real head does; with
one small spread for every key all of a domain's blocks look alike to the head, and a policy that verifies long
where the confidences are high has nothing to go on. A trace's rows are request-steps, and a hard request takes
more steps to emit its tokens, so the rows over-represent hard requests, the more so the wider the spread: the
latent is solved for blocks weighed as a serving run weighs them (``pooled.solve_latent_served``, at the
verification depth that gives the trace's tokens per step), so that a simulation, which draws requests and
weighs them by their steps again as it runs, reproduces the rows; the head's targets are compared with blocks
drawn the same way. The step and token spreads are the built-in profiles' (``fitting.VARIATION``), and so is the
spread of every key of a trace that names no requests (fitted as before: each block a fresh request's).
Domain keys map to themselves in the profile's ``domains`` table, so a mix entry naming a domain draws the pooled
fit, as a live run draws prompts of that domain regardless of benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.core.acceptance.ends import fit_ends
from simulator.core.acceptance.fitting import HEADS, VARIATION
from simulator.core.acceptance.latent import (
    HeadModel,
    Variation,
    conditional_acceptance,
    sample_blocks,
    solve_latent,
)
from simulator.core.acceptance.pooled import served_conditional, served_request_effects, solve_latent_served
from simulator.core.acceptance.trace import read_trace, recorded_ends
from simulator.core.calibration import confidence_report, logit, sts_apply, sts_fit
from simulator.errors import UserError

NOISE_GRID = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 9.0, 14.0)
SHARPNESS_GRID = (0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 2.5)
HEAD_SAMPLES = 20_000
GRID_BIAS_SAMPLES = 4_000  # per key and round while searching the grid; the chosen head's biases use HEAD_SAMPLES
BIAS_ROUNDS = 4
MIN_RATE, MAX_RATE = 1e-3, 1 - 1e-3
# the request spread is fitted for a key with at least this many requests of two or more steps (else the
# built-ins' spread), searched within [0, REQUEST_SD_MAX] by bisection on REQUEST_SD_ROUNDS halvings
MIN_REQUESTS = 20
REQUEST_SD_MAX = 8.0
REQUEST_SD_ROUNDS = 14
REQUEST_SD_REPLICAS = 8  # simulated copies of the key's requests per candidate spread


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


def between_request_share(accepted: np.ndarray, request: np.ndarray) -> float:
    """The part of the variance of the accepted length that lies between requests: the variance of the
    requests' mean accepted lengths over the mean within-request variance about the grand mean, every request
    counted once (whatever its number of blocks). A request's mean over its few blocks is noisy, so even identical
    requests share some of it: ``fit_request_sd`` compares it with the same statistic of simulated requests of the same
    step counts."""
    _, inverse, counts = np.unique(np.asarray(request), return_inverse=True, return_counts=True)
    acc = np.asarray(accepted, dtype=float)
    means = np.bincount(inverse, weights=acc) / counts
    grand = means.mean()
    total = np.bincount(inverse, weights=(acc - grand) ** 2) / counts
    return float(np.mean((means - grand) ** 2) / total.mean()) if total.mean() > 0 else 0.0


def fit_request_sd(accepted: np.ndarray, request: np.ndarray, gamma: int, var: Variation = VARIATION,
                   seed: int = 5) -> float | None:
    """The spread of the request effect u under which requests with the trace's step counts, their latent means
    solved from the trace's conditional acceptance, have the trace's ``between_request_share``;
    None when the key has fewer than MIN_REQUESTS requests of two or more blocks (nothing to tell requests
    apart with). The same draws serve every candidate, so the share rises smoothly with the spread and a
    bisection finds it."""
    acc = np.asarray(accepted)
    request = np.asarray(request)
    _, counts = np.unique(request, return_counts=True)
    if int((counts >= 2).sum()) < MIN_REQUESTS:
        return None
    want = between_request_share(acc, request)
    cond = conditional_from_accepted(acc, gamma)
    sim_request = np.repeat(np.arange(len(counts) * REQUEST_SD_REPLICAS), np.tile(counts, REQUEST_SD_REPLICAS))
    unit = np.random.default_rng(seed).standard_normal(len(counts) * REQUEST_SD_REPLICAS)[sim_request]

    def share(sd: float) -> float:
        spread = replace(var, request_sd=sd)
        # only the accepted lengths count here: any head will do for the confidences sample_blocks also draws
        _, sim_acc = sample_blocks(solve_latent(cond, spread), spread, HEADS["dflash"][1], len(sim_request),
                                   np.random.default_rng(seed + 1), request_effect=sd * unit)
        return between_request_share(sim_acc, sim_request)

    lo, hi = 0.0, REQUEST_SD_MAX
    if share(lo) >= want:
        return lo
    if share(hi) <= want:
        return hi
    for _ in range(REQUEST_SD_ROUNDS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if share(mid) < want else (lo, mid)
    return 0.5 * (lo + hi)


def _round(values) -> list[float]:
    return [round(float(v), 6) for v in np.atleast_1d(values)]


def _mean_quality(raw: np.ndarray, accepted: np.ndarray) -> tuple[float, float]:
    rep = confidence_report(raw, accepted)
    return float(np.nanmean(rep["auroc"])), float(np.nanmean(rep["ece"]))


@dataclass(frozen=True)
class ServedKey:
    """A mix key of a trace that names its requests: its latent spread (request_sd) and the verification depth at
    which its model emits the trace's tokens per step (``pooled.solve_latent_served``)."""

    variation: Variation
    depth: float


def _request_effects(mu: np.ndarray, served: list[ServedKey] | None, key: np.ndarray, seed: int) -> np.ndarray | None:
    """Per simulated block (key (n,) the index of its mix key, mu (keys, gamma)) a request effect drawn as the
    trace's rows see them (``pooled.served_request_effects``); None (sample_blocks draws fresh effects of the
    variation's spread) for a trace that names no requests."""
    if served is None:
        return None
    rng = np.random.default_rng(seed)
    out = np.empty(len(key))
    for k, s in enumerate(served):
        at = np.flatnonzero(key == k)
        out[at] = served_request_effects(mu[k], s.variation, s.depth, len(at), rng)
    return out


def fit_head_bias(mu: np.ndarray, head: HeadModel, mean_seen: np.ndarray, samples: int = HEAD_SAMPLES,
                  rounds: int = BIAS_ROUNDS, served: list[ServedKey] | None = None,
                  temperatures: np.ndarray | None = None) -> np.ndarray:
    """Raw-logit biases (keys, gamma) under which blocks simulated from mu (keys, gamma), with each key's
    request effects as its trace rows see them when ``served`` (keys,) says how, have the mean confidences
    mean_seen (keys, gamma), raw ones or, given the ``temperatures`` (gamma,) the policy saw them through, those
    calibrated: a fixed-point iteration on the logit gap, with the same draws each round."""
    mean_seen = np.clip(mean_seen, MIN_RATE, MAX_RATE)
    bias = np.zeros_like(mu)
    effects = [None if served is None else _request_effects(mu[k:k + 1], served[k:k + 1], np.zeros(samples, int), 13)
               for k in range(len(mu))]
    for _ in range(rounds):
        for k in range(len(mu)):
            effect = effects[k]
            sim_raw, _ = sample_blocks(mu[k], VARIATION, head, samples, np.random.default_rng(11), head_bias=bias[k],
                                       request_effect=effect)
            if temperatures is None:
                bias[k] += logit(mean_seen[k]) - logit(np.clip(sim_raw.mean(axis=0), MIN_RATE, MAX_RATE))
            else:  # a calibrated logit is the raw one over T: a raw-logit step is T times the calibrated gap
                seen = sts_apply(sim_raw, temperatures).mean(axis=0)
                bias[k] += temperatures * (logit(mean_seen[k]) - logit(np.clip(seen, MIN_RATE, MAX_RATE)))
    return bias


def _within_key_quality(raw: np.ndarray, accepted: np.ndarray, key: np.ndarray, weights: np.ndarray
                        ) -> tuple[float, float]:
    """Mean raw AUROC and ECE within each key (key (n,) its index), averaged with the keys' weights: with each
    key's bias fitted, this is what the head's noise and sharpness still have to match (pooled, the differences
    between keys would count as discrimination)."""
    quality = np.array([_mean_quality(raw[key == k], accepted[key == k]) for k in range(len(weights))])
    return tuple(np.nansum(quality * weights[:, None], axis=0) / weights.sum())


def fit_head(mu: np.ndarray, weights: np.ndarray, mean_seen: np.ndarray, raw: np.ndarray, accepted: np.ndarray,
             key: np.ndarray, rng: np.random.Generator, served: list[ServedKey] | None = None,
             temperatures: np.ndarray | None = None) -> tuple[HeadModel, dict]:
    """The (noise_sd, sharpness) of the grid whose simulated blocks, with each key's raw-logit bias fitted to its
    mean confidences as the policy saw them (``fit_head_bias``), come closest to the trace's raw AUROC and raw ECE
    within keys. mu, mean_seen: (keys, gamma); weights: (keys,) each key's share of the trace's blocks; raw,
    accepted: the trace's blocks, key (n,) the index of each block's key; served: (keys,) each key's request spread
    and verification depth, for a trace that names its requests; temperatures: those the policy saw the
    confidences through."""
    want_auroc, want_ece = _within_key_quality(raw, accepted, key, weights)
    pick = rng.choice(len(mu), size=HEAD_SAMPLES, p=weights)
    effect = _request_effects(mu, served, pick, 17)
    best = None
    for noise in NOISE_GRID:
        for sharp in SHARPNESS_GRID:
            head = HeadModel(noise_sd=noise, sharpness=sharp)
            bias = fit_head_bias(mu, head, mean_seen, samples=GRID_BIAS_SAMPLES, served=served,
                                 temperatures=temperatures)
            sim_raw, sim_acc = sample_blocks(mu[pick], VARIATION, head, HEAD_SAMPLES, np.random.default_rng(7),
                                             head_bias=bias[pick], request_effect=effect)
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


def tokens_per_step(rows: pd.DataFrame, gamma: int) -> float:
    """Tokens the recorded run's decode steps emitted per step for these rows' requests: their output less the
    first token (the prefill's) over their rows, clipped to what a step can emit (1 .. gamma + 1). Rows without
    the ``output`` column: the full block's tokens."""
    if "output" not in rows.columns or rows["output"].isna().any():
        return float(1 + np.minimum(rows["accepted"].to_numpy(), gamma).mean())
    per_request = rows.groupby("request")["output"].agg(["first", "size"])
    return float(np.clip((per_request["first"] - 1).sum() / per_request["size"].sum(), 1.0, 1.0 + gamma))


def names_requests(rows: pd.DataFrame) -> bool:
    """Whether every row names its request (a live run's trace does; ``dspark eval``'s does not)."""
    return "request" in rows.columns and not rows["request"].isna().any()


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
        # a trace that names each row's request: each key's request spread is fitted, and its latent is solved for
        # blocks weighed as the run's request-steps weighed them
        named = names_requests(rows)
        request = rows["request"].to_numpy() if named else None
        entries, key_mu, key_served = {}, {}, {}
        for key, sel in keys.items():
            cond = conditional_from_accepted(acc[sel], gamma)
            entries[key] = {"tau": round(float(1 + np.cumprod(cond).sum()), 6), "conditional": _round(cond)}
            if named:
                sd = fit_request_sd(acc[sel], request[sel], gamma)
                spread = VARIATION if sd is None else replace(VARIATION, request_sd=float(sd))
                key_mu[key], depth = solve_latent_served(cond, spread, tokens_per_step(rows[sel], gamma))
                key_served[key] = ServedKey(spread, depth)
                entries[key].update(request_sd=round(spread.request_sd, 6), verify_depth=round(depth, 6),
                                    requests=len(np.unique(request[sel])))
            else:
                key_mu[key] = solve_latent(cond, VARIATION)
            entries[key].update(mu=_round(key_mu[key]), blocks=int(sel.sum()))
        domain_keys = sorted(set(domains))
        mus = np.array([key_mu[d] for d in domain_keys])
        domain_served = [key_served[d] for d in domain_keys] if named else None
        w = np.array([entries[d]["blocks"] for d in domain_keys], dtype=float)
        w /= w.sum()
        raw_cols = [f"raw_{j}" for j in range(1, gamma + 1)]
        has_raw = all(c in rows.columns for c in raw_cols) and not rows[raw_cols].isna().any().any()
        entry: dict = {"gamma": gamma}
        if has_raw:
            raw = np.clip(rows[raw_cols].to_numpy(dtype=float), 1e-6, 1 - 1e-6)
            c_cols = [f"c_{j}" for j in range(1, gamma + 1)]
            deployed = deployed_temperatures(raw, rows[c_cols].to_numpy(dtype=float)) if all(
                c in rows.columns for c in c_cols) else None
            seen_by_policy = raw if deployed is None else sts_apply(raw, deployed)
            mean_seen = {key: seen_by_policy[sel].mean(axis=0) for key, sel in keys.items()}
            block_domain = np.searchsorted(np.array(domain_keys), domains)  # each block's index into mus
            head, seen = fit_head(mus, w, np.array([mean_seen[d] for d in domain_keys]), raw, acc, block_domain, rng,
                                  served=domain_served, temperatures=deployed)
            entry["head"] = {"kind": "confidence-head", "noise_sd": head.noise_sd, "sharpness": head.sharpness}
            bias = dict(zip(keys, fit_head_bias(np.array([key_mu[k] for k in keys]), head,
                                                np.array([mean_seen[k] for k in keys]),
                                                served=[key_served[k] for k in keys] if named else None,
                                                temperatures=deployed),
                            strict=True))
            for key, b in bias.items():
                entries[key]["head_bias"] = _round(b)
            domain_bias = np.array([bias[d] for d in domain_keys])
            pick = rng.choice(len(mus), HEAD_SAMPLES, p=w)
            sim_raw, sim_acc = sample_blocks(mus[pick], VARIATION, head, HEAD_SAMPLES, rng,
                                             head_bias=domain_bias[pick],
                                             request_effect=_request_effects(mus, domain_served, pick, 19))
            half = HEAD_SAMPLES // 2
            temps = deployed
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
        for key, e in entries.items():  # the solves are exact; rounding to 6 digits must not undo them
            fitted = (served_conditional(np.array(e["mu"]), key_served[key].variation, key_served[key].depth)
                      if named else conditional_acceptance(np.array(e["mu"]), VARIATION))
            assert np.allclose(fitted, e["conditional"], atol=1e-4)
        entry["benchmarks"] = entries
        drafters[drafter] = entry
    profile = {
        "name": name,
        "target": "",
        "description": (f"Fitted to the acceptance trace {source} ({len(df)} request-steps) by "
                        "`simulate fit-profile`: conditional acceptance per domain and benchmark, confidence head "
                        "matched to the trace's mean confidence per key and position as its policy saw it, raw AUROC "
                        "and ECE."
                        + (" Request spread per key fitted to the between-request share of the accepted length's "
                           "variance (request_sd), latent solved for blocks weighed as the run's request-steps."
                           if names_requests(df) else "")),
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

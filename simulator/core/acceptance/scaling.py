"""A profile scaled to one measured acceptance length: the input a planner has from its engine's logs.

A scenario sets ``acceptance.acceptance_length: L`` (optionally ``acceptance_length_at: k``, the drafts verified
per step when L was measured; default the scenario drafter's gamma). The profile's entry for the scenario's
drafter is then scaled by the rule:

- one logit shift s, the same at every position of every benchmark, c'_j = sigmoid(logit(c_j) + s): the profile's
  shape across positions and benchmarks is kept, only its level moves (as ``fitting`` fits the paper profiles);
- s is the one value at which the accepted length *as a run of this scenario measures it* equals L: verifying k
  drafts every step, pooled over request-steps (``pooled.pooled_tau``, over the scenario's output lengths when
  they are lognormal or fixed, else the library's reference ones), over the workload mix (each mix entry's weight
  split evenly over its benchmarks, pooled as runs.csv pools: total tokens / total steps);
- the latent means follow from the shifted rates (``latent.solve_latent``), so the run's request-steps reproduce
  them. Other drafters of the profile are untouched.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simulator.core.acceptance.latent import Variation, solve_latent
from simulator.core.acceptance.pooled import lognormal_output_pmf, pooled_tau
from simulator.core.calibration import logit, sigmoid

SHIFT_RANGE = 15.0  # logits: far past any rate a real drafter logs, either way
RATE_BOUND = 1e-6  # shifted rates stay this far inside (0, 1), where the latent model is solvable


def shifted(z: np.ndarray, s: float) -> np.ndarray:
    """The conditional rates of logits ``z`` shifted by ``s``."""
    return np.clip(sigmoid(z + s), RATE_BOUND, 1.0 - RATE_BOUND)


def mix_weights(profile, drafter: str, mix: dict[str, float]) -> np.ndarray:
    """Weight of each of the drafter's benchmarks in the workload mix (each entry's weight split evenly over the
    benchmarks it stands for, as the source draws them), normalised."""
    d = profile.drafters[drafter]
    w = np.zeros(len(d.benchmarks))
    for key, weight in mix.items():
        benches = profile.benchmarks_for(key)
        for b in benches:
            w[d.benchmarks.index(b)] += weight / len(benches)
    return w / w.sum()


def _latent(conditional: np.ndarray, var: Variation, request_sd: np.ndarray | None) -> np.ndarray:
    if request_sd is None:
        return solve_latent(conditional, var)
    return np.stack([solve_latent(c, replace(var, request_sd=float(sd))) for c, sd in zip(conditional, request_sd,
                                                                                         strict=True)])


def benchmark_lengths(profile, drafter: str, conditional: np.ndarray, at: int,
                      decoded_pmf: np.ndarray) -> np.ndarray:
    """Per benchmark, the accepted length a run measures verifying ``at`` drafts a step with the drafter's rates
    ``conditional`` (benchmarks, gamma), pooled over its request-steps."""
    d = profile.drafters[drafter]
    cols = np.minimum(np.arange(at), d.gamma - 1)
    mu = _latent(conditional, profile.variation, d.request_sd)[:, cols]
    if d.request_sd is None:
        return pooled_tau(mu, profile.variation, decoded_pmf)
    return np.array([pooled_tau(m, replace(profile.variation, request_sd=float(sd)), decoded_pmf)
                     for m, sd in zip(mu, d.request_sd, strict=True)])


def pooled_over_mix(lengths: np.ndarray, weights: np.ndarray) -> float:
    """The mix's accepted length as runs.csv pools it (total tokens / total steps), every benchmark's requests
    emitting alike: the weighted harmonic mean."""
    keep = weights > 0
    return float(1.0 / np.sum(weights[keep] / lengths[keep]))


def _fresh_shift(z: np.ndarray, at: int, weights: np.ndarray, target: float) -> float:
    """The shift that gives the target to fresh requests (no pooling, no latent model): a cheap first guess."""
    cols = np.minimum(np.arange(at), z.shape[1] - 1)
    lo, hi = -SHIFT_RANGE, SHIFT_RANGE
    while hi - lo > 1e-9:
        mid = 0.5 * (lo + hi)
        fresh = 1.0 + np.cumprod(sigmoid(z[:, cols] + mid), axis=1).sum(axis=1)
        lo, hi = (mid, hi) if pooled_over_mix(fresh, weights) < target else (lo, mid)
    return 0.5 * (lo + hi)


def _secant(length, target: float, start: float, tol: float = 1e-9) -> float | None:
    """Secant steps on the shift from ``start`` (pooling moves the answer a little from there); None when they
    do not settle within a few steps."""
    s0, s1 = start, start + 0.1
    e0 = length(s0) - target
    for _ in range(12):
        e1 = length(s1) - target
        if abs(e1) < tol:
            return s1
        if e1 == e0 or not abs(s1) < SHIFT_RANGE:
            return None
        s0, e0, s1 = s1, e1, s1 - e1 * (s1 - s0) / (e1 - e0)
    return None


def _bracketed(length, target: float, drafter: str, name: str, at: int) -> float:
    """Regula falsi (Illinois) on the whole range; Unreachable when the target lies outside it."""
    lo, hi = -SHIFT_RANGE, SHIFT_RANGE
    f_lo, f_hi = length(lo) - target, length(hi) - target
    if f_lo > 0 or f_hi < 0:
        raise Unreachable(f"{target:g} is outside what drafter {drafter!r} of profile {name!r} reaches at {at} "
                          f"drafts a step as a run measures it ({f_lo + target:.3f} to {f_hi + target:.3f})")
    s, side = lo, 0
    for _ in range(200):
        s = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        f = length(s) - target
        if abs(f) < 1e-9 or hi - lo < 1e-12:
            break
        if f > 0:  # the length rises with the shift, so the bracket always holds the root
            hi, f_hi = s, f
            if side == 1:
                f_lo /= 2
            side = 1
        else:
            lo, f_lo = s, f
            if side == -1:
                f_hi /= 2
            side = -1
    return s


class Unreachable(ValueError):
    """The target lies outside what any shift of the profile reaches (as a run pools it)."""


_SCALED: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def scaled_profile(profile, drafter: str, target: float, at: int, mix: dict[str, float],
                   output: tuple[float, float, int]):
    """The profile with ``drafter``'s rates shifted so a run measures accepted length ``target`` at ``at`` drafts
    a step (module docstring). Cached on the profile's file and the arguments (every run of a sweep asks the
    same); raises Unreachable."""
    stamp = profile.path.stat().st_mtime_ns if profile.path.exists() else 0
    key = (str(profile.path), stamp, drafter, float(target), int(at), tuple(sorted(mix.items())), tuple(output))
    if key not in _SCALED:
        _SCALED[key] = _scale(profile, drafter, float(target), int(at), mix, output)
    conditional, mu, tau = _SCALED[key]
    d = replace(profile.drafters[drafter], conditional=conditional, mu=mu, tau=tau)
    return replace(profile, drafters={**profile.drafters, drafter: d})


def _scale(profile, drafter, target, at, mix, output):
    d = profile.drafters[drafter]
    weights = mix_weights(profile, drafter, mix)
    decoded = lognormal_output_pmf(*output)
    z = logit(np.clip(d.conditional, 1e-9, 1 - 1e-9))

    def length(s: float) -> float:
        return pooled_over_mix(benchmark_lengths(profile, drafter, shifted(z, s), at, decoded), weights)

    s = _secant(length, target, _fresh_shift(z, at, weights, target))
    if s is None:  # far from where the fresh-request shift points (or out of reach): bracket it
        s = _bracketed(length, target, drafter, profile.name, at)
    conditional = shifted(z, s)
    mu = _latent(conditional, profile.variation, d.request_sd)
    return conditional, mu, benchmark_lengths(profile, drafter, conditional, at, decoded)

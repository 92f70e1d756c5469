"""tau as a serving run measures it: pooled over every request-step, requests run to their length.

The paper's Table 1 (DeepSpec's evaluator) and this simulator's ``runs.csv`` both measure the accepted length as
total emitted tokens / total request-steps. A request whose prompt is hard (latent effect u low, see
``latent.py``) takes more steps to emit its tokens, so it weighs more in that ratio than an easy one: the pooled
tau is a step-weighted (roughly harmonic) mean over requests, below the per-request-step expectation that
``latent.full_block_tau`` gives. A request also cannot verify past its end (l <= remaining - 1), so its last step
emits fewer tokens.

With the full block verified every step, steps are independent given u, and the number of steps a request of
n decoded tokens needs follows a renewal recursion. In a closed loop at steady state (or pooled over finished
requests) the measured tau is then exactly

    tau_pooled = E[n] / E_{u, n}[steps(n | u)],

with u integrated by Gauss-Hermite quadrature and n from the workload's output-length distribution.
"""

from __future__ import annotations

import math

import numpy as np

from simulator.core.acceptance.latent import Variation, mean_sigmoid, solve_latent, solve_latent_over

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(40)  # probabilists': weight exp(-x^2/2)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()
# steps(n) is exact up to here; beyond, its renewal limit n / mean + c (the error decays geometrically)
_EXACT_UP_TO = 256


def outcome_pmf_given_request(mu: np.ndarray, var: Variation) -> np.ndarray:
    """P(accepted = k | u) for k = 0..gamma at the request-effect quadrature nodes: (..., nodes, gamma + 1).

    mu: (..., gamma). The step effect v and the token noise are integrated out; the block is fully verified."""
    mu = np.asarray(mu, dtype=float)
    u = var.request_sd * _NODES
    v = var.step_sd * _NODES
    x = mu[..., None, None, :] + u[:, None, None] + v[None, :, None]  # (..., u, v, gamma)
    surv = np.cumprod(mean_sigmoid(x, var.token_sd), axis=-1)
    surv = np.einsum("...uvj,v->...uj", surv, _WEIGHTS)  # P(accepted >= j | u), j = 1..gamma
    at_least = np.concatenate((np.ones((*surv.shape[:-1], 1)), surv, np.zeros((*surv.shape[:-1], 1))), axis=-1)
    return at_least[..., :-1] - at_least[..., 1:]


def expected_steps(emit_pmf: np.ndarray, n_max: int) -> np.ndarray:
    """Expected steps to emit n = 0..n_max tokens when a step emits K ~ emit_pmf (index k - 1 for K = k), capped
    at what remains: (..., n_max + 1).

    steps(0) = 0; steps(n) = 1 + sum_k P(K = k) steps(max(n - k, 0))."""
    emit_pmf = np.asarray(emit_pmf, dtype=float)
    kmax = emit_pmf.shape[-1]
    exact = min(n_max, _EXACT_UP_TO)
    steps = np.zeros((*emit_pmf.shape[:-1], exact + 1 + kmax))  # padded: steps[kmax + n] holds n's value
    rev = emit_pmf[..., ::-1]
    for n in range(1, exact + 1):
        steps[..., kmax + n] = 1.0 + np.einsum("...k,...k->...", rev, steps[..., n : n + kmax])
    out = steps[..., kmax:]
    if n_max > exact:
        mean = emit_pmf @ np.arange(1, kmax + 1)
        extra = np.arange(1, n_max - exact + 1)
        out = np.concatenate((out, out[..., -1:] + extra / mean[..., None]), axis=-1)
    return out


def pooled_tau(mu: np.ndarray, var: Variation, decoded_pmf: np.ndarray) -> np.ndarray:
    """tau pooled over request-steps with the full block verified: (...,) for mu (..., gamma).

    decoded_pmf: P(a request decodes n tokens), n = 0..len - 1 (its first token comes from the prefill)."""
    decoded_pmf = np.asarray(decoded_pmf, dtype=float)
    n = np.arange(len(decoded_pmf))
    pmf = outcome_pmf_given_request(mu, var)  # (..., u, gamma + 1): emitted = accepted + 1
    steps = expected_steps(pmf, len(decoded_pmf) - 1) @ decoded_pmf  # (..., u)
    return float(decoded_pmf @ n) / (steps @ _WEIGHTS)


def lognormal_output_pmf(median: float, sigma: float, cap: int | None) -> np.ndarray:
    """P(a request decodes n tokens), n = 0..cap - 1, for output lengths drawn as the workload draws them:
    max(1, round(median * exp(sigma z))), capped; decoded = output - 1."""
    cap = int(cap) if cap else int(np.ceil(median * np.exp(6 * sigma)))
    edges = np.log(np.arange(1, cap + 1) + 0.5) - np.log(median)
    cdf = 0.5 * (1.0 + _erf(edges / (sigma * np.sqrt(2.0))))
    cdf[-1] = 1.0  # the cap collects the tail
    return np.diff(np.concatenate(([0.0], cdf)))


_erf = np.vectorize(math.erf, otypes=[float])


# Latent means for blocks as a serving run's request-steps see them. Quadrature over the request effect u and the
# step effect v apart (the token noise by latent.mean_sigmoid): u is what tells a run's requests apart, and a
# request's weight among the steps depends on it
_U_NODES, _U_WEIGHTS = np.polynomial.hermite_e.hermegauss(24)
_U_WEIGHTS = _U_WEIGHTS / _U_WEIGHTS.sum()
_V_NODES, _V_WEIGHTS = np.polynomial.hermite_e.hermegauss(12)
_V_WEIGHTS = _V_WEIGHTS / _V_WEIGHTS.sum()
SERVED_ROUNDS = 8


def survival_given_request(mu: np.ndarray, var: Variation, u: np.ndarray) -> np.ndarray:
    """(gamma, len(u)): P(accepted >= j | u), j = 1..gamma, the step effect and token noise integrated out."""
    x = np.asarray(mu, dtype=float)[:, None, None] + np.asarray(u, dtype=float)[None, :, None] + \
        var.step_sd * _V_NODES[None, None, :]
    return np.cumprod(mean_sigmoid(x, var.token_sd), axis=0) @ _V_WEIGHTS


def emitted_per_step(survival: np.ndarray, depth: float) -> np.ndarray:
    """Tokens a step emits, given u, when it verifies ``depth`` draft tokens (a fractional depth verifies
    floor(depth) + 1 tokens on that fraction of steps): 1 + sum_{j <= depth} P(accepted >= j | u).
    survival: (gamma, n) as ``survival_given_request`` gives it."""
    whole = int(np.floor(depth))
    out = 1.0 + survival[:whole].sum(axis=0)
    if whole < len(survival):
        out = out + (depth - whole) * survival[whole]
    return out


def _verify_depth(survival: np.ndarray, tokens_per_step: float) -> float:
    """The depth at which requests of effects at the u nodes emit ``tokens_per_step`` tokens per step pooled
    over their steps (each request's steps in proportion to 1 / its tokens per step), clipped to [0, gamma]."""
    def pooled(depth: float) -> float:
        return 1.0 / float(_U_WEIGHTS @ (1.0 / emitted_per_step(survival, depth)))
    lo, hi = 0.0, float(len(survival))
    if pooled(hi) <= tokens_per_step:
        return hi
    if pooled(lo) >= tokens_per_step:
        return lo
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if pooled(mid) < tokens_per_step else (lo, mid)
    return 0.5 * (lo + hi)


def served_conditional(mu: np.ndarray, var: Variation, depth: float) -> np.ndarray:
    """The conditional acceptance of blocks pooled over a serving run's request-steps: each request weighs as
    many steps as it takes, in proportion to 1 / its tokens per step at verification ``depth``."""
    surv = survival_given_request(mu, var, var.request_sd * _U_NODES)
    steps = _U_WEIGHTS / emitted_per_step(surv, depth)
    pooled = surv @ steps / steps.sum()
    return pooled / np.concatenate(([1.0], pooled[:-1]))


def solve_latent_served(conditional: np.ndarray, var: Variation, tokens_per_step: float,
                        tol: float = 1e-9) -> tuple[np.ndarray, float]:
    """(mu, depth): latent means whose blocks, pooled over the request-steps of a run that emits
    ``tokens_per_step`` tokens per step, have the conditional acceptance ``conditional`` (gamma,).

    A trace's rows are such request-steps: a request that accepts little takes more steps to emit its tokens,
    so it has more rows, and with a wide spread of request effects the rows' conditional acceptance sits well
    below a fresh request's (``latent.solve_latent`` reads it as a fresh request's). The verification depth,
    the tokens a step verifies on average, is what sets how much more: fitted so that the model's pooled tokens
    per step equal the run's. Fixed point: the step weights of the current mu, then mu solved left to right by
    bisection under them (as ``latent.solve_latent``), SERVED_ROUNDS times."""
    conditional = np.asarray(conditional, dtype=float)
    u = var.request_sd * _U_NODES
    offsets = (u[:, None] + var.step_sd * _V_NODES[None, :]).ravel()  # (u, v) nodes, u-major
    mu = solve_latent(conditional, var)
    depth = float(len(conditional))
    for _ in range(SERVED_ROUNDS):
        survival = survival_given_request(mu, var, u)
        depth = _verify_depth(survival, tokens_per_step)
        # (u, v) quadrature weights of a step: the request's step weight times the step effect's
        cell = (_U_WEIGHTS / emitted_per_step(survival, depth))[:, None] * _V_WEIGHTS[None, :]
        mu = solve_latent_over(conditional, offsets, cell.ravel(), var.token_sd, tol)
    return mu, depth


def served_request_effects(mu: np.ndarray, var: Variation, depth: float, n: int,
                           rng: np.random.Generator) -> np.ndarray:
    """n request effects u as a serving run's request-steps see them: N(0, request_sd^2) draws resampled in
    proportion to the steps such a request takes (1 / its tokens per step at ``depth``), for simulating blocks
    to compare with a trace's rows."""
    fresh = rng.normal(0.0, var.request_sd, 4 * n)
    if var.request_sd == 0.0:
        return fresh[:n]
    grid = np.linspace(fresh.min(), fresh.max(), 257)
    steps = 1.0 / np.interp(fresh, grid, emitted_per_step(survival_given_request(mu, var, grid), depth))
    return rng.choice(fresh, size=n, p=steps / steps.sum())

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

from simulator.core.acceptance.latent import Variation, mean_sigmoid

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

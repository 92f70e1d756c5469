"""The latent model behind statistical acceptance profiles, and its exact fit.

Per request-step of a drafter with block gamma, draft token j (1-based) survives verification, given that tokens
1..j-1 did, with probability q_j = sigmoid(x_j), where

    x_j = mu_j + u + v + e_j,     u ~ N(0, request_sd^2)  drawn once per request (prompt difficulty),
                                  v ~ N(0, step_sd^2)     drawn per step (local predictability),
                                  e_j ~ N(0, token_sd^2)  drawn per token.

mu_j (one per benchmark and position) is what a profile fits. The observed position-wise conditional acceptance
(paper Figure 2: the share of blocks that accept token j among those that accepted 1..j-1) is

    p_j = E[prod_{i<=j} q_i] / E[prod_{i<j} q_i],

larger than E[q_j] at later positions because survivors skew towards easy requests and steps. Given target
conditional rates p_1..p_gamma, mu is solved left to right so each p_j holds exactly; expectations use
Gauss-Hermite quadrature (u + v share one Gaussian, the e_j are independent given it). Verifying the full block
then emits tau = 1 + sum_j prod_{i<=j} p_i tokens per request-step of a fresh request on average. A serving run
pools over request-steps, which weighs hard requests by their many steps: ``pooled.py`` gives that measured tau,
and it is the one the built-in profiles fit to Table 1.

The confidence head observes o_j = x_j + n_j, n_j ~ N(0, noise_sd^2), and reports the posterior mean of q_j
(normal prior on x_j, probit approximation) sharpened by ``sharpness`` >= 1: raw heads are overconfident, as the
paper's Figure 6 shows. STS temperatures fitted on simulated blocks calibrate it. A profile fitted to a trace may
also carry a per-benchmark ``head_bias`` b_j added to the raw logit: a real head's miscalibration can differ by
domain (more confident on one domain than its acceptance warrants), which one shared mapping cannot express.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.core.calibration import logit, sigmoid

_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(48)  # probabilists': weight exp(-x^2/2)
_GH_WEIGHTS = _GH_WEIGHTS / _GH_WEIGHTS.sum()


@dataclass(frozen=True)
class Variation:
    request_sd: float = 0.5
    step_sd: float = 0.4
    token_sd: float = 2.0

    @property
    def shared_sd(self) -> float:
        return float(np.hypot(self.request_sd, self.step_sd))

    @property
    def total_var(self) -> float:
        return self.request_sd**2 + self.step_sd**2 + self.token_sd**2


@dataclass(frozen=True)
class HeadModel:
    """How a drafter's reported confidence relates to the truth. ``noise_sd``: observation noise (higher = less
    discrimination); ``sharpness``: logit scale of the raw output (> 1 = overconfident)."""

    noise_sd: float
    sharpness: float

    def raw_logit_coefficients(self, mu: np.ndarray, var: Variation) -> tuple[np.ndarray, float]:
        """raw logit = A + Bo * o, elementwise in mu: (A (same shape as mu), Bo)."""
        vx = var.total_var
        rho = vx / (vx + self.noise_sd**2)
        scale = self.sharpness / np.sqrt(1.0 + np.pi * vx * (1.0 - rho) / 8.0)
        return scale * (1.0 - rho) * mu, scale * rho


def mean_sigmoid(m: np.ndarray, sd: float) -> np.ndarray:
    """E[sigmoid(m + sd * z)], z ~ N(0, 1), elementwise in m."""
    m = np.asarray(m, dtype=float)
    return sigmoid(m[..., None] + sd * _GH_NODES) @ _GH_WEIGHTS


def survival_given_shared(mu: np.ndarray, var: Variation) -> np.ndarray:
    """(gamma, nodes): prod_{i<=j} E[q_i | u+v = w] at the quadrature nodes w."""
    w = var.shared_sd * _GH_NODES
    g = mean_sigmoid(mu[:, None] + w[None, :], var.token_sd)
    return np.cumprod(g, axis=0)


def conditional_acceptance(mu: np.ndarray, var: Variation) -> np.ndarray:
    """Observed position-wise conditional acceptance p_j implied by mu."""
    surv = survival_given_shared(np.asarray(mu, dtype=float), var) @ _GH_WEIGHTS
    return surv / np.concatenate(([1.0], surv[:-1]))


def full_block_tau(conditional: np.ndarray) -> float:
    """Mean emitted tokens (bonus included) when the whole block is verified."""
    return float(1.0 + np.cumprod(conditional).sum())


def solve_latent(conditional: np.ndarray, var: Variation, tol: float = 1e-10) -> np.ndarray:
    """mu such that conditional_acceptance(mu) == conditional, left to right by bisection.

    conditional: (..., gamma); the leading axes are solved together (independent rows)."""
    conditional = np.asarray(conditional, dtype=float)
    if not np.all((conditional > 0.0) & (conditional < 1.0)):
        bad = conditional[~((conditional > 0.0) & (conditional < 1.0))].flat[0]
        raise ValueError(f"conditional acceptance must lie in (0, 1), got {bad}")
    return solve_latent_over(conditional, var.shared_sd * _GH_NODES, _GH_WEIGHTS, var.token_sd, tol)


def solve_latent_over(conditional: np.ndarray, offsets: np.ndarray, weights: np.ndarray, token_sd: float,
                      tol: float = 1e-10) -> np.ndarray:
    """mu such that blocks whose latent at position j is mu_j plus an offset drawn from ``offsets`` with
    probabilities ``weights`` (a quadrature of the shared effects) have the conditional acceptance
    ``conditional``: left to right by bisection, each position among the blocks that survived the ones before.

    conditional: (..., gamma); the leading axes are solved together (independent rows)."""
    conditional = np.asarray(conditional, dtype=float)
    lead = conditional.shape[:-1]
    prefix = np.ones(lead + offsets.shape)
    mu = np.empty(conditional.shape)
    for j in range(conditional.shape[-1]):
        target = conditional[..., j]
        base = prefix @ weights
        lo, hi = np.full(lead, -30.0), np.full(lead, 30.0)
        while np.max(hi - lo) > tol:
            mid = 0.5 * (lo + hi)
            rate = (prefix * mean_sigmoid(mid[..., None] + offsets, token_sd)) @ weights / base
            below = rate < target
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        mu[..., j] = 0.5 * (lo + hi)
        prefix = prefix * mean_sigmoid(mu[..., j, None] + offsets, token_sd)
    return mu


def scale_shape_to_tau(shape: np.ndarray, tau: float, tol: float = 1e-12) -> np.ndarray:
    """Conditional rates sigmoid(logit(shape) + s) with the one shift s that makes the full-block tau equal tau."""
    shape = np.asarray(shape, dtype=float)
    gamma = len(shape)
    if not 1.0 < tau < 1.0 + gamma:
        raise ValueError(f"tau {tau} is not reachable with a block of {gamma}")
    z = logit(shape)
    lo, hi = -30.0, 30.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if full_block_tau(sigmoid(z + mid)) < tau else (lo, mid)
    return sigmoid(z + 0.5 * (lo + hi))


def sample_blocks(mu: np.ndarray, var: Variation, head: HeadModel, n: int, rng: np.random.Generator,
                  request_effect: np.ndarray | None = None,
                  head_bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Draw n independent full blocks: (raw confidences (n, gamma), accepted draft tokens (n,)).

    mu: (gamma,) or (n, gamma). request_effect: (n,) per-row u, drawn fresh when None. head_bias: like mu, added
    to the raw logit (none when None)."""
    mu = np.broadcast_to(np.asarray(mu, dtype=float), (n, np.shape(mu)[-1]))
    gamma = mu.shape[1]
    u = rng.normal(0.0, var.request_sd, n) if request_effect is None else request_effect
    shared = u + rng.normal(0.0, var.step_sd, n)
    x = mu + shared[:, None] + rng.normal(0.0, var.token_sd, (n, gamma))
    accept = rng.random((n, gamma)) < sigmoid(x)
    accepted = np.logical_and.accumulate(accept, axis=1).sum(axis=1)
    a, bo = head.raw_logit_coefficients(mu, var)
    if head_bias is not None:
        a = a + head_bias
    raw = sigmoid(a + bo * (x + rng.normal(0.0, head.noise_sd, (n, gamma))))
    return raw, accepted

"""Where requests end: the position of a request's end-of-sequence token, fitted from recorded requests and drawn
for simulated ones.

A recorded request is (``output``, ``eos``): it emitted ``output`` tokens and either ended at its end token (an
event at position ``output``) or stopped without one, at its drawn length or at the end of the run (censored: its
end token would come after ``output``). The model is a discrete hazard, the probability that token t is the end
token given that none of tokens 1..t-1 was; every generated token is one trial, so censored requests count for
the positions they reached.

Two hazards are fitted by maximum likelihood and the data chooses between them: a constant hazard (geometric end
positions; events / tokens generated) and a piecewise-constant hazard on doubling position bins (1, 2-3, 4-7, ...,
the last open-ended). The constant one is kept unless the likelihood-ratio test rejects it at the 5% level
(chi-square with one degree of freedom per extra bin); the fit states both log-likelihoods, the test and the
counts. With no event at all there is nothing to end requests with (``kind: none``).

A simulated request's end position E is drawn by inverting the survival function; conditioned on E > s (a
recorded request that stopped at s without its end token) by drawing the uniform below S(s). The request ends at
the earlier of E and its drawn length, as a live run ends a request at its end token or its drawn length.
"""

from __future__ import annotations

import math

import numpy as np

NEVER = np.iinfo(np.int64).max  # no end token: the request runs to its drawn length
P_VALUE = 0.05


def bin_edges(longest: int) -> np.ndarray:
    """Doubling bins [1, 2), [2, 4), [4, 8), ... covering 1..longest; the last bin is open-ended when drawn."""
    edges = [1]
    while edges[-1] <= longest:
        edges.append(edges[-1] * 2)
    return np.array(edges, dtype=np.int64)


def _events_exposure(output: np.ndarray, eos: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per bin: end tokens seen, and tokens generated (trials) inside the bin."""
    lo, hi = edges[:-1], edges[1:]
    reached = np.clip(output[:, None] - lo[None, :] + 1, 0, (hi - lo)[None, :])  # positions of the bin each reached
    exposure = reached.sum(axis=0).astype(float)
    events = np.array([int(((output >= a) & (output < b) & eos).sum()) for a, b in zip(lo, hi, strict=True)],
                      dtype=float)
    return events, exposure


def _loglik(events: np.ndarray, exposure: np.ndarray, hazard: np.ndarray) -> float:
    h = np.clip(hazard, 1e-300, 1 - 1e-12)
    return float(np.sum(np.where(events > 0, events * np.log(h), 0.0) + (exposure - events) * np.log1p(-h)))


def _chi2_sf(x: float, df: int) -> float:
    """Survival function of the chi-square distribution (regularised upper incomplete gamma, series/continued
    fraction as in Numerical Recipes), so the simulator needs no scipy."""
    if df <= 0:
        return 1.0
    a, z = df / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    if z < a + 1:  # series for the lower function
        term = total = 1.0 / a
        n = a
        for _ in range(500):
            n += 1
            term *= z / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(-z + a * math.log(z) - math.lgamma(a)))
    b = z + 1 - a  # continued fraction for the upper function
    c, d = 1e300, 1 / b
    h = d
    for i in range(1, 500):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1 / d if abs(d) > 1e-300 else 1e300
        c = b + an / c if abs(c) > 1e-300 else b
        step = d * c
        h *= step
        if abs(step - 1) < 1e-15:
            break
    return min(1.0, math.exp(-z + a * math.log(z) - math.lgamma(a)) * h)


def fit_ends(output: np.ndarray, eos: np.ndarray) -> dict:
    """The end model of recorded requests (``output`` (n,) tokens each emitted, ``eos`` (n,) bool: it ended at its
    end token), as a profile stores it: ``kind`` constant-hazard | piecewise-hazard | none, the hazard, the bins'
    lower edges (piecewise), and the fit (counts, log-likelihoods, the likelihood-ratio test)."""
    output = np.asarray(output, dtype=np.int64)
    eos = np.asarray(eos, dtype=bool)
    keep = output >= 1
    output, eos = output[keep], eos[keep]
    n_events = int(eos.sum())
    fit = {"requests": len(output), "ended_at_eos": n_events, "censored": int(len(output) - n_events),
           "tokens": int(output.sum())}
    if n_events == 0:
        return {"kind": "none", "fit": fit}
    edges = bin_edges(int(output.max()))
    events, exposure = _events_exposure(output, eos, edges)
    used = exposure > 0
    constant = n_events / float(output.sum())
    piecewise = np.where(used, events / np.maximum(exposure, 1.0), 0.0)
    ll_constant = _loglik(events[used], exposure[used], np.full(used.sum(), constant))
    ll_piecewise = _loglik(events[used], exposure[used], piecewise[used])
    lr = max(0.0, 2.0 * (ll_piecewise - ll_constant))
    df = int(used.sum()) - 1
    p = _chi2_sf(lr, df)
    fit.update({"loglik_constant": round(ll_constant, 4), "loglik_piecewise": round(ll_piecewise, 4),
                "likelihood_ratio": round(lr, 4), "df": df, "p_value": round(p, 6),
                "mean_end_position_constant": round(1.0 / constant, 3)})
    if p >= P_VALUE or df == 0:
        return {"kind": "constant-hazard", "hazard": round(constant, 8), "fit": fit}
    # a bin past the last one any request reached keeps the hazard of the last one that had exposure
    last = np.flatnonzero(used)[-1]
    hazard = piecewise[: last + 1]
    return {"kind": "piecewise-hazard", "bins": edges[: last + 1].tolist(), "hazard": [round(float(h), 8) for h in hazard],
            "fit": fit}


class EndModel:
    """Draws end positions from a fitted model (``fit_ends``'s dict)."""

    def __init__(self, spec: dict, where: str = "ends"):
        kind = spec.get("kind")
        if kind == "none":
            self.bins, self.hazard = np.array([1]), np.array([0.0])
        elif kind == "constant-hazard":
            self.bins, self.hazard = np.array([1]), np.array([float(spec["hazard"])])
        elif kind == "piecewise-hazard":
            self.bins = np.asarray(spec["bins"], dtype=np.int64)
            self.hazard = np.asarray(spec["hazard"], dtype=float)
            if len(self.bins) != len(self.hazard) or self.bins[0] != 1 or np.any(np.diff(self.bins) <= 0):
                raise ValueError(f"{where}: bins must start at 1 and increase, one hazard per bin")
        else:
            raise ValueError(f"{where}.kind: expected none, constant-hazard or piecewise-hazard, got {kind!r}")
        if np.any((self.hazard < 0) | (self.hazard >= 1)):
            raise ValueError(f"{where}.hazard: every hazard must be in [0, 1)")
        self.kind = kind

    def _cumulative(self, t: np.ndarray) -> np.ndarray:
        """-log S(t): the cumulative hazard after tokens 1..t (t >= 0)."""
        lo = self.bins
        hi = np.append(self.bins[1:], NEVER)
        in_bin = np.clip(t[:, None] - lo[None, :] + 1, 0, (hi - lo)[None, :]).astype(float)
        return in_bin @ -np.log1p(-self.hazard)

    def draw(self, n: int, rng: np.random.Generator, survived: np.ndarray | None = None) -> np.ndarray:
        """End positions (n,) int64, ``NEVER`` where there is none; conditioned on E > survived[i] when given."""
        u = rng.random(n)
        if n == 0 or not np.any(self.hazard > 0):
            return np.full(n, NEVER, dtype=np.int64)
        target = -np.log(np.maximum(u, 1e-300))  # E = the first t with cumulative hazard >= -log u
        if survived is not None:
            target = target + self._cumulative(np.maximum(np.asarray(survived, dtype=np.int64), 0))
        rates = -np.log1p(-self.hazard)
        lo = self.bins
        widths = np.append(np.diff(self.bins), NEVER).astype(float)
        before = np.concatenate(([0.0], np.cumsum(rates[:-1] * widths[:-1])))  # cumulative hazard before each bin
        out = np.full(n, NEVER, dtype=np.int64)
        for k in range(len(lo)):  # bins, a handful
            rate = rates[k]
            if rate <= 0:
                continue
            inside = (target > before[k]) & (target <= before[k] + rate * widths[k]) & (out == NEVER)
            out[inside] = lo[k] + np.ceil((target[inside] - before[k]) / rate).astype(np.int64) - 1
        return np.maximum(out, 1)

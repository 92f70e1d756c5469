"""Acceptance profiles of drafters people deploy, from the engines' public logs and benchmarks.

    python -m simulator.core.acceptance.deployed        # rewrite scenarios/profiles/deployed-*.yaml

The numbers are in scenarios/profiles/deployed-acceptance.csv, each row naming its public source; docs/
deployed-acceptance.md says what each profile holds and how far to trust it. How a row becomes a profile entry:

- Engines log, per position j, the share of drafting steps whose j-th draft token was accepted (vLLM's
  per-position acceptance rate): a survival s_j, pooled over steps, and 1 + sum_j s_j is the mean accepted length
  (AL) they report. Where a row gives s_j at every position, the conditional rates s_j / s_{j-1} are the shape.
- Where it gives only the first and last positions and the AL (GLM-5.2's DSpark-16), the first conditional is
  s_1 and the rest are logit-linear in position, the one line that meets both the last survival and the AL
  (``endpoint_shape``): an interpolation, not a measurement.
- Where it gives only the AL, the shape is flat (one conditional rate at every position).
- The level: one logit shift of the shape so that the AL *as a serving run pools it* (``pooled.pooled_tau``, over
  the source's output length where the row gives one, else the library's reference lengths) equals the row's AL, as the paper profiles are fitted to Table 1
  (``fitting.fit_pooled``). The confidence head and STS temperatures are the paper profiles' (``fitting.HEADS``),
  fitted here on simulated blocks of these rates.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pandas as pd
import yaml

from simulator.core.acceptance.fitting import (
    HEADS,
    QUALITY_SAMPLES,
    REFERENCE_OUTPUT,
    VARIATION,
    confidence_quality,
    fit_pooled,
)
from simulator.core.acceptance.latent import full_block_tau, sample_blocks
from simulator.core.calibration import sigmoid
from simulator.inputs.library import library_dir

PROFILE_DIR = library_dir() / "profiles"
DATA = PROFILE_DIR / "deployed-acceptance.csv"
TARGETS = {"deployed-deepseek-v4": "DeepSeek-V4 (Flash and Pro)", "deployed-glm-5.2": "GLM-5.2"}


def _round(values) -> list[float]:
    return [round(float(v), 6) for v in np.atleast_1d(values)]


def conditional_from_survival(survival: np.ndarray) -> np.ndarray:
    """Conditional acceptance per position from logged per-position (survival) rates."""
    s = np.asarray(survival, dtype=float)
    return s / np.concatenate(([1.0], s[:-1]))


def endpoint_shape(first: float, last: float, length: float, gamma: int, tol: float = 1e-12) -> np.ndarray:
    """Conditional rates c_1 = first and c_j = sigmoid(a + b (j - 2)) for j = 2..gamma such that the survival at
    gamma is ``last`` and 1 + sum of the survivals is ``length``. For each slope b one intercept a meets the last
    survival; a steeper b front-loads the fall, so the sum falls as b rises, and b is found by bisection."""
    steps = np.arange(gamma - 1, dtype=float)

    def meet_last(b: float) -> np.ndarray:
        lo, hi = -40.0, 40.0
        while hi - lo > tol:
            a = 0.5 * (lo + hi)
            lo, hi = (a, hi) if first * np.prod(sigmoid(a + b * steps)) < last else (lo, a)
        return np.concatenate(([first], sigmoid(0.5 * (lo + hi) + b * steps)))

    def total(b: float) -> float:
        return full_block_tau(meet_last(b))

    lo, hi = -5.0, 5.0
    if not total(hi) <= length <= total(lo):
        raise ValueError(f"no logit-linear shape meets first {first}, last {last} and length {length}")
    while hi - lo > 1e-10:
        b = 0.5 * (lo + hi)
        lo, hi = (b, hi) if total(b) > length else (lo, b)
    return meet_last(0.5 * (lo + hi))


def flat_shape(length: float, gamma: int) -> np.ndarray:
    """One conditional rate at every position with 1 + sum of survivals equal to ``length``."""
    lo, hi = 1e-9, 1.0 - 1e-9
    while hi - lo > 1e-12:
        c = 0.5 * (lo + hi)
        lo, hi = (c, hi) if full_block_tau(np.full(gamma, c)) < length else (lo, c)
    return np.full(gamma, 0.5 * (lo + hi))


def row_shape(rows: pd.DataFrame) -> np.ndarray:
    """The conditional shape of one (profile, drafter, benchmark) from its rows (see the module docstring)."""
    gamma = int(rows["gamma"].iloc[0])
    length = float(rows["acceptance_length"].iloc[0])
    given = rows.dropna(subset=["position", "acceptance"])
    positions = given["position"].astype(int).to_numpy()
    rates = given["acceptance"].to_numpy(float)
    if len(given) == gamma and np.array_equal(np.sort(positions), np.arange(1, gamma + 1)):
        return conditional_from_survival(rates[np.argsort(positions)])
    if len(given) == 2 and set(positions) == {1, gamma}:
        first, last = rates[positions == 1][0], rates[positions == gamma][0]
        return endpoint_shape(first, last, length, gamma)
    if len(given) == 0:
        return flat_shape(length, gamma)
    raise ValueError(f"{DATA.name}: {rows['profile'].iloc[0]} {rows['drafter'].iloc[0]} "
                     f"{rows['benchmark'].iloc[0]}: give every position, the first and last, or none")


def pooled_over(rows: pd.DataFrame) -> tuple[float, float, int]:
    """The output lengths (lognormal median, sigma, cap) the row's accepted length is pooled over: the source's
    fixed length where it states one, else the library's reference lengths."""
    n = rows["output_tokens"].iloc[0]
    return REFERENCE_OUTPUT if pd.isna(n) else (int(n), 1e-6, int(n) + 1)


def drafter_entry(drafter: str, rows: pd.DataFrame, rng: np.random.Generator) -> dict:
    kind, head = HEADS[drafter]
    benches = list(dict.fromkeys(rows["benchmark"]))
    groups = [rows[rows["benchmark"] == b] for b in benches]
    gamma = {int(g["gamma"].iloc[0]) for g in groups}
    if len(gamma) != 1:
        raise ValueError(f"{DATA.name}: drafter {drafter}: every benchmark needs the same gamma, got {sorted(gamma)}")
    lengths = np.array([float(g["acceptance_length"].iloc[0]) for g in groups])
    outputs = [pooled_over(g) for g in groups]
    fits = [fit_pooled(row_shape(g)[None, :], lengths[i:i + 1], output=outputs[i]) for i, g in enumerate(groups)]
    conds, mus = (np.concatenate(x) for x in zip(*fits, strict=True))
    entry: dict = {"gamma": gamma.pop(), "head": {"kind": kind, "noise_sd": head.noise_sd, "sharpness": head.sharpness}}
    mus = np.round(mus, 6)
    pick = rng.integers(0, len(mus), QUALITY_SAMPLES)
    raw, accepted = sample_blocks(mus[pick], VARIATION, head, QUALITY_SAMPLES, rng)
    entry.update(confidence_quality(raw, accepted, kind))
    entry["benchmarks"] = {}
    for i, (b, g) in enumerate(zip(benches, groups, strict=True)):
        logged = g.dropna(subset=["position", "acceptance"]).sort_values("position")
        entry["benchmarks"][b] = {
            "tau": round(float(lengths[i]), 6),
            "tau_fresh_request": round(full_block_tau(conds[i]), 6),
            "conditional": _round(conds[i]),
            "mu": _round(mus[i]),
            "pooled_over_output": {"median": outputs[i][0], "sigma": outputs[i][1], "cap": outputs[i][2]},
            "logged_acceptance": {int(p): float(a) for p, a in zip(logged["position"], logged["acceptance"],
                                                                   strict=True)},
            "source": str(g["source"].iloc[0]),
        }
    return entry


def build_profile(name: str, table: pd.DataFrame, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    rows = table[table["profile"] == name]
    domains = {str(b): str(d) for b, d in rows[["benchmark", "domain"]].drop_duplicates().itertuples(index=False)}
    drafters = {d: drafter_entry(d, rows[rows["drafter"] == d], rng) for d in dict.fromkeys(rows["drafter"])}
    sources = "; ".join(dict.fromkeys(s.split(":")[0] for s in rows["source"]))
    return {
        "name": name,
        "target": TARGETS[name],
        "description": (
            f"Deployed drafters of {TARGETS[name]}: acceptance from public engine logs and benchmarks ({sources}), "
            "each benchmark's source beside it; the shape from the logged per-position rates, the level so that the "
            "pooled accepted length equals the logged one. Generated by `python -m simulator.core.acceptance."
            "deployed` from deployed-acceptance.csv; do not edit by hand."
        ),
        "variation": {"request_sd": VARIATION.request_sd, "step_sd": VARIATION.step_sd, "token_sd": VARIATION.token_sd},
        "domains": domains,
        "drafters": drafters,
    }


def read_data() -> pd.DataFrame:
    """The CSV without its leading '#' lines (pandas' comment option would also cut the sources' '#1234')."""
    lines = DATA.read_text(encoding="utf-8").splitlines()
    return pd.read_csv(io.StringIO("\n".join(ln for ln in lines if not ln.startswith("#"))))


def main(argv: list[str] | None = None) -> int:
    from atomic_files import atomic_write_text

    table = read_data()
    for name in TARGETS:
        profile = build_profile(name, table)
        out = PROFILE_DIR / f"{name}.yaml"
        text = "# " + profile["description"] + "\n" + yaml.safe_dump(profile, sort_keys=False, width=120,
                                                                      default_flow_style=None)
        atomic_write_text(out, text)
        for drafter, d in profile["drafters"].items():
            taus = ", ".join(f"{b} {v['tau']:.2f}" for b, v in d["benchmarks"].items())
            print(f"{out.name}: {drafter} (gamma {d['gamma']}): pooled tau {taus}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

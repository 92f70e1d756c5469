"""Statistical acceptance profiles: files in scenarios/profiles/, and the source that samples from them.

A profile holds, per drafter, the latent model of ``latent.py`` fitted per benchmark (``mu``), the confidence
head's quality and its STS temperatures. See ``fitting.py`` for how the built-in ``paper-*`` profiles are made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import yaml
from numba import njit

from simulator.core.acceptance.base import AcceptanceSource, GrowingArrays, Proposal, register
from simulator.core.acceptance.ends import NEVER, EndModel
from simulator.core.acceptance.fitting import REFERENCE_OUTPUT
from simulator.core.acceptance.latent import HeadModel, Variation
from simulator.core.acceptance.normal_table import LEVELS, quantiles
from simulator.core.acceptance.scaling import Unreachable, scaled_profile
from simulator.core.plugins import did_you_mean
from simulator.errors import UserError
from simulator.inputs.library import library_dir

if TYPE_CHECKING:
    from simulator.inputs.config import LoadedScenario

PROFILE_DIR = library_dir() / "profiles"
# every run reads its profile: libyaml's parser (when PyYAML has it) takes ~10 ms where the pure-Python one takes
# ~70 ms, about a tenth of a quick run; the documents it builds are the same (SafeLoader's constructor)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class DrafterProfile:
    gamma: int
    head: HeadModel
    sts_temperatures: np.ndarray | None
    benchmarks: list[str]
    mu: np.ndarray  # (benchmarks, gamma)
    tau: np.ndarray  # (benchmarks,) full-block tau pooled over request-steps (runs.csv's), as fitted
    conditional: np.ndarray  # (benchmarks, gamma)
    quality: dict
    head_bias: np.ndarray | None = None  # (benchmarks, gamma) raw-logit shift per benchmark (latent.py), if fitted
    # (benchmarks,) the spread of the request effect per benchmark, if fitted (trace_fit.py); else the variation's
    request_sd: np.ndarray | None = None


@dataclass
class Profile:
    name: str
    path: Path
    target: str
    description: str
    variation: Variation
    domains: dict[str, str]  # benchmark -> domain
    drafters: dict[str, DrafterProfile]
    ends: dict[str, EndModel] | None = None  # per domain or benchmark: where requests end (fitted to a live trace)

    def benchmarks_for(self, key: str) -> list[str]:
        """The benchmarks a workload mix entry stands for: a domain (all its benchmarks) or one benchmark."""
        if key in self.domains:
            return [key]
        return [b for b, d in self.domains.items() if d == key]


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def resolve_profile_path(name_or_path: str, base: Path | None = None) -> Path:
    candidates = []
    p = Path(name_or_path)
    if base is not None and not p.is_absolute():
        candidates.append(base / p)
    candidates += [p, PROFILE_DIR / f"{name_or_path}.yaml"]
    for c in candidates:
        if c.is_file():
            return c
    raise UserError(f"acceptance profile {name_or_path!r} not found; built-in profiles: {', '.join(available_profiles())}")


def check_mix(scn: LoadedScenario, profile: Profile) -> None:
    """Every workload mix entry must be a domain or a benchmark of the profile."""
    for key in scn.model.workload.mix:
        if not profile.benchmarks_for(key):
            domains = sorted(set(profile.domains.values()))
            raise UserError(f"{scn.path}: workload.mix.{key}: not a domain or benchmark of acceptance profile "
                            f"{profile.name!r}{did_you_mean(key, [*domains, *profile.domains])}; domains: "
                            f"{', '.join(domains)}; benchmarks: {', '.join(profile.domains)}")


def load_profile(name_or_path: str, base: Path | None = None) -> Profile:
    path = resolve_profile_path(name_or_path, base)
    try:
        raw = yaml.load(path.read_text(), Loader=_YAML_LOADER)
        var = Variation(**raw["variation"])
        domains = {str(k): str(v) for k, v in raw["domains"].items()}
        drafters = {}
        for name, d in raw["drafters"].items():
            benches = list(d["benchmarks"])
            unknown = [b for b in benches if b not in domains]
            if unknown:
                raise UserError(f"{path}: drafters.{name}.benchmarks: {unknown[0]!r} has no domain in 'domains'")
            temps = d.get("sts_temperatures")
            drafters[name] = DrafterProfile(
                gamma=int(d["gamma"]),
                head=HeadModel(noise_sd=float(d["head"]["noise_sd"]), sharpness=float(d["head"]["sharpness"])),
                sts_temperatures=None if temps is None else np.asarray(temps, dtype=float),
                benchmarks=benches,
                mu=np.array([d["benchmarks"][b]["mu"] for b in benches], dtype=float),
                tau=np.array([d["benchmarks"][b]["tau"] for b in benches], dtype=float),
                conditional=np.array([d["benchmarks"][b]["conditional"] for b in benches], dtype=float),
                quality=dict(d.get("quality", {})),
                head_bias=(np.array([d["benchmarks"][b].get("head_bias", [0.0] * int(d["gamma"])) for b in benches],
                                    dtype=float)
                           if any("head_bias" in d["benchmarks"][b] for b in benches) else None),
                request_sd=(np.array([d["benchmarks"][b].get("request_sd", var.request_sd) for b in benches],
                                     dtype=float)
                            if any("request_sd" in d["benchmarks"][b] for b in benches) else None),
            )
    except UserError:
        raise
    except (KeyError, TypeError, ValueError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: not a valid acceptance profile ({type(exc).__name__}: {exc})") from None
    ends = None
    if raw.get("ends"):
        try:
            ends = {str(k): EndModel(v, f"{path}: ends.{k}") for k, v in raw["ends"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UserError(f"{path}: ends: not a valid end model ({exc})") from None
    return Profile(name=str(raw.get("name", path.stem)), path=path, target=str(raw.get("target", "")),
                   description=str(raw.get("description", "")), variation=var, domains=domains, drafters=drafters,
                   ends=ends)


def output_lengths(scenario: LoadedScenario) -> tuple[float, float, int]:
    """The workload's output lengths as (lognormal median, sigma, cap) for pooling an accepted length over them:
    lognormal and fixed lengths as given, any other the library's reference lengths."""
    out = scenario.model.workload.output
    if out.dist == "lognormal":
        return float(out.median), float(out.sigma), int(out.max) if out.max else 0
    if out.dist == "fixed":
        return float(out.value), 1e-6, int(out.value) + 1
    return REFERENCE_OUTPUT


def scaled_to_length(scenario: LoadedScenario, profile: Profile, drafter: str) -> Profile:
    """The profile with the scenario drafter's entry scaled to ``acceptance.acceptance_length`` when the scenario
    sets one (scaling.py); the profile unchanged otherwise, and for the other drafters."""
    acc = scenario.model.acceptance
    if acc.acceptance_length is None or drafter != scenario.model.drafter.name or drafter not in profile.drafters:
        return profile
    from simulator.inputs.config import acceptance_length_at

    mix = dict(scenario.model.workload.mix)
    try:
        return scaled_profile(profile, drafter, acc.acceptance_length, acceptance_length_at(scenario.model), mix,
                              output_lengths(scenario))
    except Unreachable as exc:
        raise UserError(f"{scenario.path}: acceptance.acceptance_length: {exc}") from None


@register
class ProfileSource(AcceptanceSource):
    """Samples acceptance and confidences per request-step from a profile's latent model (vectorised).

    The profile is the scenario's ``acceptance.profile`` (a built-in name or a file). A system's gamma may differ
    from the profile's block: shorter blocks use the first gamma positions (prefix acceptance is unaffected by
    what is not drafted); longer ones repeat the last position's parameters.
    """

    name = "profile"
    draws_outcome = True

    def __init__(self, *, scenario: LoadedScenario, drafter: str, gamma: int, mix: list[str], calibrated: bool,
                 rng: np.random.Generator):
        profile = load_profile(scenario.model.acceptance.profile, scenario.base)
        check_mix(scenario, profile)
        self._sample(scaled_to_length(scenario, profile, drafter), drafter, gamma, mix, calibrated, rng)

    @classmethod
    def of(cls, profile: Profile, *, drafter: str, gamma: int, mix: list[str], calibrated: bool,
           rng: np.random.Generator) -> ProfileSource:
        """The source of a profile already in hand (one just fitted, or loaded by name), without a scenario."""
        source = cls.__new__(cls)
        source._sample(profile, drafter, gamma, mix, calibrated, rng)
        return source

    def _sample(self, profile: Profile, drafter: str, gamma: int, mix: list[str], calibrated: bool,
                rng: np.random.Generator) -> None:
        if drafter not in profile.drafters:
            raise UserError(f"profile {profile.name!r} has no drafter {drafter!r}; it has {', '.join(profile.drafters)}")
        d = profile.drafters[drafter]
        self.gamma = int(gamma)
        cols = np.minimum(np.arange(self.gamma), d.gamma - 1)
        self.mu = np.ascontiguousarray(d.mu[:, cols])
        a, b_obs = d.head.raw_logit_coefficients(self.mu, profile.variation)
        if d.head_bias is not None:
            a = a + d.head_bias[:, cols]
        temps = d.sts_temperatures[cols] if (calibrated and d.sts_temperatures is not None) else np.ones(self.gamma)
        # the policy's logit is (A + Bo * o) / T: fold the temperatures in once
        self.a_over_t = np.ascontiguousarray(a / temps[None, :])
        self.b_over_t = b_obs / temps
        self.var = profile.variation
        # a request's effect is drawn standard and scaled by its benchmark's spread where the profile fitted one
        # per benchmark; otherwise drawn with the variation's spread and scaled by exactly 1 (the built-ins' draws)
        fitted = d.request_sd is not None
        self._effect_sd = 1.0 if fitted else self.var.request_sd
        self._effect_scale = np.ascontiguousarray(d.request_sd if fitted else np.ones(len(d.benchmarks)), dtype=float)
        self.noise_sd = d.head.noise_sd
        self._step_sd, self._token_sd, self._noise_sd = (
            _times_noise(v) for v in (self.var.step_sd, self.var.token_sd, self.noise_sd))
        self.rng = rng
        # per request: its latent means (benchmark's mu plus its own difficulty) and the head's logit offsets
        self.state = GrowingArrays(base=(np.float64, self.gamma), head=(np.float64, self.gamma))
        choices = []
        for key in mix:
            benches = profile.benchmarks_for(key)
            if not benches:
                raise UserError(
                    f"workload mix entry {key!r} is neither a domain nor a benchmark of profile {profile.name!r} "
                    f"(domains: {', '.join(sorted(set(profile.domains.values())))}; benchmarks: {', '.join(profile.domains)})"
                )
            choices.append(np.array([d.benchmarks.index(b) for b in benches]))
        # where requests of each mix entry end, when the profile says (its own model, else its domain's)
        self.end_models = None
        if profile.ends:
            self.end_models = [profile.ends.get(key) or profile.ends.get(profile.domains.get(key, key)) for key in mix]
            self.mix_of = GrowingArrays(key=np.int64)
        self._choices_flat = np.concatenate(choices)
        self._choice_count = np.array([len(c) for c in choices])
        self._choice_start = np.concatenate(([0], np.cumsum(self._choice_count)[:-1]))

    def attach(self, ids: np.ndarray, mix_index: np.ndarray) -> None:
        if len(ids) == 0:
            return
        self.state.ensure(int(ids.max()))
        # a uniform pick among each request's mix entry's benchmarks, and the request's difficulty
        uniform = self.rng.random(len(ids))
        effect = self.rng.normal(0.0, self._effect_sd, len(ids))
        if self.end_models is not None:
            self.mix_of.ensure(int(ids.max()))
            self.mix_of.key[ids] = mix_index
        _attach(np.asarray(ids, dtype=np.int64), np.asarray(mix_index, dtype=np.int64), uniform, effect,
                self._choice_count, self._choice_start, self._choices_flat, self.mu, self.a_over_t,
                self._effect_scale, self.state.base, self.state.head)

    def end_positions(self, ids: np.ndarray) -> np.ndarray | None:
        if self.end_models is None:
            return None
        out = np.full(len(ids), NEVER, dtype=np.int64)
        keys = self.mix_of.key[ids]
        for k, model in enumerate(self.end_models):  # mix entries, a handful
            at = np.flatnonzero(keys == k)
            if model is not None and len(at):
                out[at] = model.draw(len(at), self.rng)
        return out

    def propose(self, ids: np.ndarray) -> Proposal:
        rows, gamma = len(ids), self.gamma
        # per request-step: one shared step effect, gamma token noises, gamma head observation noises (normal
        # table indices), then gamma uniforms for acceptance; the arithmetic is one compiled pass
        noise = self.rng.integers(0, LEVELS, (rows, 2 * gamma + 1), dtype=np.uint16)
        uniform = self.rng.random((rows, gamma))
        confidence = np.empty((rows, gamma))
        outcome = np.empty(rows, dtype=np.int64)
        _propose(np.asarray(ids, dtype=np.int64), self.state.base, self.state.head, quantiles(), noise, uniform,
                 self._step_sd, self._token_sd, self._noise_sd, self.b_over_t, confidence, outcome)
        return Proposal(confidence=confidence, outcome=outcome)

    def verify(self, proposal: Proposal, lengths: np.ndarray) -> np.ndarray:
        # acceptance of token j depends on the token, not on how many follow it: verifying l tokens accepts
        # the first min(l, outcome) of them
        return np.minimum(lengths, proposal.outcome)


def _times_noise(scale: float) -> np.floating:
    """The scale typed as numpy types ``scale * noise`` for float32 noise: a Python number multiplies in float32,
    a numpy float64 in float64 (NEP 50). The compiled step keeps the same precision, so its numbers match the
    array expression's bit for bit."""
    return np.result_type(scale, np.float32).type(scale)


@njit(cache=True)
def _attach(ids, mix_index, uniform, effect, choice_count, choice_start, choices_flat, mu, a_over_t, effect_scale,
            base, head):
    """New requests' state: request i takes benchmark number floor(uniform_i * count) of its mix entry's, and
    its latent means are that benchmark's mu plus its own effect times the benchmark's effect scale; its head
    offsets are the benchmark's."""
    gamma = mu.shape[1]
    for i in range(ids.shape[0]):
        m = mix_index[i]
        bench = choices_flat[choice_start[m] + np.int64(uniform[i] * choice_count[m])]
        rid = ids[i]
        u = effect[i] * effect_scale[bench]
        for j in range(gamma):
            base[rid, j] = mu[bench, j] + u
            head[rid, j] = a_over_t[bench, j]


@njit(cache=True)
def _propose(ids, base, head, quantiles, noise, uniform, step_sd, token_sd, noise_sd, b_over_t, confidence, outcome):
    """One step's drafts for the requests ``ids`` (see latent.py): x = base + step_sd v + token_sd e_j, the
    accepted prefix (uniform < sigmoid(x), the true conditional acceptance, up to the first failure) and the head's
    confidence sigmoid(((x + noise_sd n_j) * b / T) + head). noise: (R, 2 gamma + 1) normal-table indices."""
    rows, gamma = confidence.shape
    for i in range(rows):
        rid = ids[i]
        shared = step_sd * quantiles[noise[i, 0]]
        accepted = gamma
        for j in range(gamma):
            x = base[rid, j]
            x += shared
            x += token_sd * quantiles[noise[i, 1 + j]]
            if accepted == gamma:  # past the first failure the truth decides nothing
                t = 1.0 / (math.exp(-x) + 1.0)  # logits here stay within about +-25, far from exp's overflow
                if not uniform[i, j] < t:
                    accepted = j
            z = x + noise_sd * quantiles[noise[i, gamma + 1 + j]]
            z *= b_over_t[j]
            z += head[rid, j]
            confidence[i, j] = 1.0 / (math.exp(-z) + 1.0)
        outcome[i] = accepted

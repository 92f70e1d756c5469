"""Every drafter drafts exactly the gamma its system asks for, or the scenario is refused in one line (exit 2).
MTP-k is k chained passes of the one MTP module: priced as k passes of its table, each position accepted as the
profile's MTP positions say (one position: the next ones repeat it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.core.acceptance.profile import ProfileSource, load_profile
from simulator.inputs.config import load_scenario
from simulator.inputs.systems import resolve_systems
from tests.simulator.engine_helpers import simulate
from tests.simulator.test_config import run_main
from tests.simulator.test_engine import constant_profile

SMALL = dict(workload={"prompt": 64, "output": 48}, frontier={"concurrency": [6]})


@pytest.mark.parametrize(("drafter", "gamma", "policy"), [
    ("none", 0, "ar"), ("mtp", 3, "dspark"), ("dspark", 5, "threshold-0.5"), ("dflash", 4, "goodput-k"),
    ("eagle3", 3, "vllm-adaptive"),
])
def test_every_request_step_drafts_the_gamma_the_system_asks(scenario_file, drafter, gamma, policy):
    """The step log's drafted tokens (what the acceptance source proposed) are gamma a decoding request in every
    step, whatever the policy then verifies; runs.csv records the same gamma."""
    system = {"name": "s", "drafter": drafter, "policy": policy, **({"gamma": gamma} if gamma else {})}
    row, sim = simulate(scenario_file(systems=[system], **SMALL), "s", quick=True)
    st = sim.steps.frame()
    dec = st["decoding"] > 0
    assert dec.sum() > 20 and row["gamma"] == gamma
    assert np.all(st["drafted"][dec] == gamma * st["decoding"][dec])
    assert np.all(st["verified"] <= st["drafted"])
    if gamma:
        assert st["verified"].sum() > 0


@pytest.mark.parametrize("k", [1, 2, 4])
def test_mtp_k_drafts_and_verifies_k_a_step(scenario_file, k):
    """`drafter: {name: mtp, gamma: k}` with static-k (what the shorthand mtp-k names): k drafted and, short of a
    request's end, k verified by every decoding request; none of them silently one."""
    path = scenario_file(drafter={"name": "mtp", "gamma": k}, systems=[f"static-{k}"],
                         **{**SMALL, "workload": {"prompt": 64, "output": 400}})
    (spec,) = resolve_systems(load_scenario(path))
    assert (spec.name, spec.drafter, spec.gamma, spec.params) == (f"static-{k}", "mtp", k, {"k": k})
    row, sim = simulate(path, quick=True)
    st = sim.steps.frame()
    dec = st["decoding"] > 0
    assert np.all(st["drafted"][dec] == k * st["decoding"][dec])
    # only the last k steps of a 400-token request verify fewer than k
    assert row["mean_verify_budget"] == pytest.approx(1 + k, rel=0.01)


def test_mtp_alone_is_mtp_1_and_shorthands_name_mtp_k(scenario_file):
    scn = load_scenario(scenario_file(drafter={"name": "mtp"}, systems=["static-1", "mtp-3",
                                      {"policy": "static-1"}, {"gamma": 2, "policy": "static-2"}]))
    assert scn.model.drafter.gamma == 1
    got = [(s.name, s.drafter, s.gamma, s.policy) for s in resolve_systems(scn)]
    # a shorthand keeps the name it was given; an unnamed mapping verifying its whole chain is named mtp-k
    assert got == [("static-1", "mtp", 1, "static-1"), ("mtp-3", "mtp", 3, "static-3"),
                   ("mtp-1", "mtp", 1, "static-1"), ("mtp-2", "mtp", 2, "static-2")]
    # a system naming mtp beside another scenario drafter takes MTP's default, not the scenario's gamma 7
    scn = load_scenario(scenario_file(systems=["static-5", {"drafter": "mtp", "policy": "sglang-compact"}]))
    assert [(s.drafter, s.gamma) for s in resolve_systems(scn)] == [("dspark", 7), ("mtp", 1)]


def test_mtp_k_is_priced_as_k_chained_passes_of_its_table(scenario_file):
    """Each step's draft is the MTP table's pass taking in the step before's tokens, then k - 1 passes of one
    token a request: k forwards of the module's layer and head, not one over a block."""
    k = 3
    path = scenario_file(drafter={"name": "mtp", "gamma": k}, systems=[f"mtp-{k}"],
                         engine={"max_running": 64, "max_batch_tokens": 8192, "prefill": "colocated"},
                         workload={"prompt": 64, "output": 256}, frontier={"concurrency": [24]})
    _, sim = simulate(path, f"mtp-{k}", quick=True)
    st, cost = sim.steps.frame(), sim.prices.draft
    assert cost.fusion_share == 0.0 and not cost.kind.parallel and cost.takes_in == "processed"
    fed = np.concatenate([[0], np.asarray(st["batch_tokens"])[:-1]])  # vLLM's proposer: every token processed
    expect = [cost.ms(int(r), 1, float(kv), int(f)) + (k - 1) * cost.ms(int(r), 1, float(kv))
              for r, kv, f in zip(st["decoding"], st["kv_tokens"], fed, strict=True)]
    np.testing.assert_allclose(st["draft_ms"], expect, rtol=1e-12)
    one = np.array([cost.ms(int(r), 1, float(kv)) for r, kv in zip(st["decoding"], st["kv_tokens"], strict=True)])
    busy = st["decoding"] > 0
    assert np.all(st["draft_ms"][busy] >= k * one[busy]) and np.all(one[busy] > 0)


def test_mtp_k_positions_past_the_profiles_one_repeat_its_acceptance(tmp_path, scenario_file):
    """The built-in profiles give MTP one position; a chain of k drafts reads it at every position (the source's
    rule for blocks longer than a profile's), so static-k's tau is the closed form of independent acceptance."""
    profile = load_profile("paper-qwen3-8b")
    assert profile.drafters["mtp"].gamma == 1
    source = ProfileSource.of(profile, drafter="mtp", gamma=3, mix=["math", "chat"], calibrated=True,
                              rng=np.random.default_rng(0))
    np.testing.assert_array_equal(source.mu, np.repeat(profile.drafters["mtp"].mu[:, :1], 3, axis=1))

    alpha, k = 0.8, 3
    path = scenario_file(acceptance={"profile": constant_profile(tmp_path, alpha)},
                         drafter={"name": "mtp", "gamma": k}, systems=[f"mtp-{k}"],
                         workload={"prompt": 64, "output": 2048, "mix": {"chat": 1}},
                         frontier={"concurrency": [32]}, run={"duration_s": 10.0, "warmup_s": 1.0})
    row, sim = simulate(path)
    n = sim.steps.frame()["decoding"].sum()
    sd = math.sqrt(np.var(np.minimum(np.random.default_rng(0).geometric(1 - alpha, 100_000) - 1, k) + 1) / n)
    assert abs(row["tau"] - (1 - alpha ** (k + 1)) / (1 - alpha)) < 4 * sd + 0.004


@pytest.mark.parametrize(("fields", "line"), [
    ({"drafter": {"name": "none", "gamma": 3}, "systems": ["ar"]},
     "drafter.gamma: drafter 'none' drafts 0 tokens a step; expected no gamma, got 3"),
    ({"systems": [{"drafter": "none", "gamma": 2, "policy": "ar"}]},
     "systems[0].gamma: drafter 'none' drafts 0 tokens a step; expected no gamma, got 2"),
    ({"drafter": {"name": "mtp", "gamma": 2}, "systems": ["ar", "static-3"]},
     "systems[1]: static-3 verifies 3 drafts a step, but drafter 'mtp' drafts 2 (drafter.gamma); expected k <= 2, "
     "or a gamma of at least 3"),
    ({"systems": [{"drafter": "mtp", "policy": "static-2"}]},
     "systems[0].policy: static-2 verifies 2 drafts a step, but drafter 'mtp' drafts 1 (its default; set "
     "systems[0].gamma); expected k <= 1, or a gamma of at least 2"),
    ({"systems": [{"drafter": "dspark", "gamma": 4, "policy": "static-5"}]},
     "systems[0].policy: static-5 verifies 5 drafts a step, but drafter 'dspark' drafts 4 (systems[0].gamma)"),
    ({"systems": [{"drafter": "dflash", "gamma": 2, "policy": "static", "params": {"k": 3}}]},
     "systems[0].policy: static verifies 3 drafts a step, but drafter 'dflash' drafts 2 (systems[0].gamma)"),
    ({"drafter": {"name": "eagle3", "gamma": 3}, "systems": ["static-4"]},
     "systems[0]: static-4 verifies 4 drafts a step, but drafter 'eagle3' drafts 3 (drafter.gamma)"),
])
def test_a_system_that_would_draft_or_verify_fewer_than_asked_is_refused(scenario_file, capsys, fields, line):
    path = scenario_file(**fields)
    res = run_main(capsys, "check", str(path))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith(f"error: {path}: {line}")


def test_simulate_check_takes_mtp_with_gamma_k(scenario_file, capsys):
    path = scenario_file(drafter={"name": "mtp", "gamma": 2}, systems=["ar", "mtp-1", "static-2", "vllm-adaptive",
                                                                     "sglang-compact"])
    res = run_main(capsys, "check", str(path))
    assert res.returncode == 0, res.stderr
    assert ("systems (5): ar [none, gamma 0, ar], mtp-1 [mtp, gamma 1, static-1], static-2 [mtp, gamma 2, static-2], "
            "vllm-adaptive [mtp, gamma 2, vllm-adaptive], sglang-compact [mtp, gamma 2, sglang-compact]") in res.stdout


def test_simulate_check_says_when_no_system_runs_without_speculation(scenario_file, capsys):
    """Speculation can lose: check names the missing comparison where every system speculates, and only there."""
    line = "no system without speculation: whether speculating pays here is not compared (add one: --set 'systems+=ar')"
    every = run_main(capsys, "check", str(scenario_file(systems=["dspark", "static-3"])))
    assert every.returncode == 0, every.stderr
    assert line in every.stdout
    with_ar = run_main(capsys, "check", str(scenario_file(systems=["dspark", "static-3"])), "--set", "systems+=ar")
    assert with_ar.returncode == 0, with_ar.stderr
    assert "ar [none, gamma 0, ar]" in with_ar.stdout and line not in with_ar.stdout

"""The losslessness audit: Appendix A's numbers for the three schedulers, random worlds, the schedulers really
being the simulator's, and the command's output and errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from dspark_runtime.audit import StepScheduler, run_audit
from dspark_runtime.audit_worlds import appendix_a, draft_blocks, random_world
from dspark_runtime.cli import cli
from simulator.core.policies import greedy_prefix_lengths, top_k_prefix_lengths

PASS = 1e-3
CAUGHT = 1e-6


# --- Appendix A -------------------------------------------------------------------------------------------------


def test_appendix_a_dspark_never_verifies_and_matches_target():
    r = run_audit("appendix-a", "dspark", 20_000, seed=1)
    # Theta_1 = 1.8 * 0.5 = 0.9 < Theta_0 = 1.0: Algorithm 1 stops before looking at c_2
    assert r["mean_verified"] == 0.0
    assert r["distribution"]["0"] == pytest.approx(0.70, abs=0.01)
    assert r["p_value"] > PASS


def test_appendix_a_global_search_is_biased_to_085():
    r = run_audit("appendix-a", "global", 5_000, seed=2)
    # it verifies 2 tokens after A (Theta_2 = 1.134) and none after B (0.81 < 1.0): x_1 = A always survives
    assert r["admission_by_first_draft"] == {"0": 1.0, "1": 0.0}
    assert r["distribution"]["0"] == pytest.approx(0.85, abs=0.015)
    assert r["p_value"] < CAUGHT
    assert r["admission_p_value"] < CAUGHT


def test_appendix_a_dspark_async_verifies_and_matches_target():
    r = run_audit("appendix-a", "dspark-async", 20_000, seed=3)
    # capacity two steps old is 2 (old x_1 = A) or 0 (B), each half the time; with capacity 2 the fresh block
    # verifies x_2 too when x_1 = A: 0.5 * (0.5 * 2 + 0.5 * 1) = 0.75 tokens a step
    assert r["mean_verified"] == pytest.approx(0.75, abs=0.02)
    assert r["admission_by_first_draft"]["0"] == pytest.approx(0.5, abs=0.02)
    assert r["admission_by_first_draft"]["1"] == pytest.approx(0.5, abs=0.02)
    assert r["distribution"]["0"] == pytest.approx(0.70, abs=0.01)
    assert r["p_value"] > PASS
    assert r["admission_p_value"] > PASS


def test_appendix_a_world_is_calibrated_as_the_paper_states():
    w = appendix_a()
    tv_accept = lambda p, q: float(np.minimum(p, q).sum())  # noqa: E731
    assert tv_accept(w.p_first, w.q_first) == pytest.approx(w.c_first)
    for x in (0, 1):
        assert tv_accept(w.p_next[0][x], w.q_next[0][x]) == pytest.approx(w.c_next[0][x])
    assert w.sps_of(np.array([1, 2, 3])).tolist() == [1.0, 0.5, 0.45]


# --- random worlds ----------------------------------------------------------------------------------------------

# Seeds whose worlds exercise the scheduler (it verifies tokens, over 1..3 requests and gamma 2..4); the audit
# must match the target in each.
LOSSLESS_CASES = [("dspark", 1), ("dspark", 2), ("dspark", 19), ("dspark-async", 1), ("dspark-async", 10),
                  ("dspark-async", 6),
                  # the engines' planners (test_audit_engine_planners.py): worlds where each verifies tokens
                  ("vllm-adaptive", 2), ("vllm-adaptive", 6), ("vllm-adaptive", 10), ("sglang-compact", 2),
                  ("sglang-compact", 6), ("sglang-compact", 21), ("trtllm-adaptive", 2), ("trtllm-adaptive", 10)]


@pytest.mark.slow
@pytest.mark.parametrize("scheduler,seed", LOSSLESS_CASES)
def test_random_world_lossless_schedulers_match_target(scheduler, seed):
    r = run_audit("random", scheduler, 30_000, seed=seed)
    assert r["mean_verified"] > 0.3
    assert r["p_value"] > PASS
    assert r["admission_p_value"] > PASS


@pytest.mark.slow
def test_random_world_catches_the_global_search():
    seed = 6  # one request, Theta falls at the first admission and only some x_1 make it rise again
    r = run_audit("random", "global", 30_000, seed=seed)
    assert r["admission_p_value"] < CAUGHT
    assert r["p_value"] < CAUGHT
    # and in the same world the two lossless schedulers pass
    for scheduler in ("dspark", "dspark-async"):
        assert run_audit("random", scheduler, 30_000, seed=seed)["p_value"] > PASS


def test_random_worlds_are_valid_and_reproducible():
    for seed in range(20):
        w = random_world(seed)
        assert 2 <= w.vocab <= 6 and 2 <= w.gamma <= 4 and 1 <= w.requests <= 3
        for d in (w.p_first, w.q_first, w.p_next, w.q_next):
            assert np.all(d >= 0) and np.allclose(d.sum(axis=-1), 1.0)
        assert 0 < w.c_first <= 1 and np.all((w.c_next >= 0) & (w.c_next <= 1))
        sps = w.sps[1:]
        assert len(sps) == w.requests * (w.gamma + 1) and np.all(np.diff(sps) < 0)
    a, b = random_world(7), random_world(7)
    assert np.array_equal(a.p_next, b.p_next) and np.array_equal(a.sps, b.sps, equal_nan=True)
    assert run_audit("random", "dspark", 2_000, seed=7) == run_audit("random", "dspark", 2_000, seed=7)


# --- the schedulers are the simulator's -------------------------------------------------------------------------


def test_stateless_schedulers_reuse_answers_exactly():
    # Scheduling each distinct confidence matrix once must equal calling the simulator on every step.
    w = random_world(2)
    blocks = draft_blocks(w, 3_000 * w.requests, torch.Generator().manual_seed(0))
    conf = blocks.confidence.reshape(3_000, w.requests, w.gamma)
    for name, early in (("dspark", True), ("global", False)):
        got = StepScheduler(name, w).lengths(conf)
        want = np.stack([greedy_prefix_lengths(c, w.sps_of, early_stop=early) for c in conf])
        assert np.array_equal(got, want)


def test_dspark_async_capacity_comes_from_two_steps_earlier():
    w = random_world(3)
    steps = 200
    blocks = draft_blocks(w, steps * w.requests, torch.Generator().manual_seed(1))
    conf = blocks.confidence.reshape(steps, w.requests, w.gamma)
    got = StepScheduler("dspark-async", w).lengths(conf)
    assert np.all(got[:2] == 0)  # no history yet
    for t in range(2, steps):
        capacity = int(greedy_prefix_lengths(conf[t - 2], w.sps_of, early_stop=False).sum())
        assert np.array_equal(got[t], top_k_prefix_lengths(conf[t], capacity))


# --- the command ------------------------------------------------------------------------------------------------


def invoke(*args: str):
    return CliRunner().invoke(cli, ["audit-lossless", *args])


def test_command_prints_one_json_line_and_a_verdict():
    res = invoke("--case", "appendix-a", "--scheduler", "global", "--samples", "2000", "--seed", "4")
    assert res.exit_code == 1, res.output  # the global search is caught: the audit fails
    assert res.stderr.startswith("NOT lossless: global on appendix-a") and res.stderr.count("\n") == 1
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec["lossless"] is False and rec["alpha"] == 1e-3
    assert {"case", "scheduler", "samples", "distribution", "target", "p_value"} <= rec.keys()
    assert rec["case"] == "appendix-a" and rec["scheduler"] == "global" and rec["samples"] == 2000
    assert set(rec["distribution"]) == {"0", "1"} and rec["target"] == {"0": 0.7, "1": 0.3}
    assert sum(rec["distribution"].values()) == pytest.approx(1.0)
    assert rec["p_value"] < CAUGHT

    ok = invoke("--case", "appendix-a", "--scheduler", "dspark", "--samples", "2000", "--seed", "4")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["lossless"] is True
    assert ok.stderr.startswith("lossless: dspark on appendix-a") and "p = " in ok.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--scheduler", "greedy"], "unknown scheduler 'greedy'"),
        (["--case", "appendix-b", "--scheduler", "dspark"], "unknown case 'appendix-b'"),
        (["--scheduler", "dspark", "--samples", "0"], "--samples"),
        (["--scheduler", "dspark", "--samples", "many"], "many"),
        (["--case", "random"], "--scheduler"),
        (["--scheduler", "dspark", "--alpha", "0"], "--alpha"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args, needle):
    res = invoke(*args)
    assert res.exit_code == 2
    out = res.output.strip()
    assert len(out.splitlines()) == 1 and needle in out
    assert "Traceback" not in out


def test_samples_split_over_chunks_and_partial_steps(monkeypatch):
    import dspark_runtime.audit as audit

    monkeypatch.setattr(audit, "CHUNK_SAMPLES", 999)  # several chunks; the async stream keeps its history across
    r = run_audit("appendix-a", "dspark-async", 6_000, seed=8)
    assert sum(r["distribution"].values()) == pytest.approx(1.0)
    assert r["mean_verified"] == pytest.approx(0.75, abs=0.04)  # only the very first two steps lack a capacity
    assert r["p_value"] > PASS
    w = random_world(0)
    assert w.requests == 3
    r = run_audit("random", "dspark", 1_001, seed=0)  # 334 steps of 3 requests, the last one cut to 2
    assert sum(r["distribution"].values()) == pytest.approx(1.0)

"""The losslessness audit of the engines' planners (vllm-adaptive, sglang-compact, trtllm-adaptive): Appendix A in
closed form, random worlds, and every built-in DSpark-style scheduler being audited."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dspark_runtime.audit import SCHEDULERS, StepScheduler, run_audit
from dspark_runtime.audit_worlds import draft_blocks, random_world
from simulator.core.policies import REGISTRY, greedy_prefix_lengths, top_k_prefix_lengths

PASS = 1e-3


def test_every_confidence_planner_is_audited():
    """Every built-in that reads this step's or older confidences to size verification is an audit scheduler
    (static lengths, tables, thresholds on one token, history of outcomes and the oracle are not DSpark-style
    planners)."""
    planners = {"dspark", "dspark-async", "vllm-adaptive", "sglang-compact", "trtllm-adaptive"}
    assert planners <= set(REGISTRY) and planners <= set(SCHEDULERS)


@pytest.mark.slow
def test_appendix_a_vllm_adaptive_sizes_from_the_step_before():
    """One request, c_1 = 0.8, c_2 = 0.9 after A and 0 after B. The EMA of c_2 is above the break-even 0.53 exactly
    when the step before drew A (0.8 x 0.9 + 0.2 x at most 0.9 against 0.2 x at most 0.9), so the budget is 2 or
    0 half the time each, whatever the current x_1: 0.5 x (0.5 x 2 + 0.5 x 1) = 0.75 tokens a step."""
    r = run_audit("appendix-a", "vllm-adaptive", 20_000, seed=3)
    assert r["mean_verified"] == pytest.approx(0.75, abs=0.02)
    assert r["admission_by_first_draft"]["0"] == pytest.approx(0.5, abs=0.02)
    assert r["admission_by_first_draft"]["1"] == pytest.approx(0.5, abs=0.02)
    assert r["distribution"]["0"] == pytest.approx(0.70, abs=0.01)
    assert r["p_value"] > PASS and r["admission_p_value"] > PASS


def test_appendix_a_sglang_compact_stops_early_on_its_fit():
    """The line fitted to SPS(1..3) = 1, 0.5, 0.45 (1000, 2000, 2222 ms) makes the first token worth verifying
    always and the second only after A (c_2 = 0.9): 1.5 tokens a step, x_1 admitted whatever it is."""
    r = run_audit("appendix-a", "sglang-compact", 20_000, seed=4)
    assert r["mean_verified"] == pytest.approx(1.5, abs=0.02)
    assert r["admission_by_first_draft"] == {"0": 1.0, "1": 1.0}
    assert r["distribution"]["0"] == pytest.approx(0.70, abs=0.01)
    assert r["p_value"] > PASS


@pytest.mark.slow
def test_appendix_a_trtllm_adaptive_buys_the_second_draft_after_an_a():
    """Its floor verifies x_1 every step; the second draft is bought (Theta 2.52 / 2222 against 1.8 / 2000, 26%
    over its 1% margin) exactly when the block before drew A (c_2 = 0.9; after B its survival is 0 and the trim
    wins), and the first step, with no block before, takes the neutral 1 and buys it: about 1.5 tokens a step,
    x_1 admitted whatever it is."""
    r = run_audit("appendix-a", "trtllm-adaptive", 20_000, seed=5)
    assert r["mean_verified"] == pytest.approx(1.5, abs=0.02)
    assert r["admission_by_first_draft"] == {"0": 1.0, "1": 1.0}
    assert r["distribution"]["0"] == pytest.approx(0.70, abs=0.01)
    assert r["p_value"] > PASS


# their random worlds run with the other lossless schedulers' (test_audit.py, LOSSLESS_CASES)


def test_vllm_adaptive_in_the_audit_is_the_simulators_policy():
    """The audit's stream equals the policy's rule written out: budget from the running average (0.8 on the
    newest step) of the steps before, top-n allocation on the live block."""
    w = random_world(3)
    steps = 200
    blocks = draft_blocks(w, steps * w.requests, torch.Generator().manual_seed(1))
    conf = np.asarray(blocks.confidence, dtype=float).reshape(steps, w.requests, w.gamma)
    got = StepScheduler("vllm-adaptive", w).lengths(conf)
    assert np.all(got[0] == 0)
    ema = conf[0].copy()
    for t in range(1, steps):
        budget = int(greedy_prefix_lengths(ema, w.sps_of, early_stop=False).sum())
        assert np.array_equal(got[t], top_k_prefix_lengths(conf[t], budget))
        ema = 0.8 * conf[t] + 0.2 * ema

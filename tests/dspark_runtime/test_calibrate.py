"""STS as the runtime applies it: fitted on a held-out set it lowers the ECE of the cumulative product of an
overconfident head (synthetic), keeps AUROC; and on the smoke world's real rollouts it is saved with the drafter."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dspark_runtime.calibrate import fit_sts
from dspark_runtime.rollouts import Blocks
from simulator.core.calibration import confidence_report, logit, sigmoid, sts_apply


def synthetic_blocks(n: int, gamma: int, seed: int) -> tuple[Blocks, np.ndarray]:
    rng = np.random.default_rng(seed)
    true_p = sigmoid(rng.normal(1.0, 1.2, (n, gamma)))
    accept = rng.random((n, gamma)) < true_p
    accepted = np.where(accept.all(1), gamma, accept.argmin(1))
    raw = sigmoid(logit(true_p) * 2.5 + 0.5)  # overconfident and biased upwards
    dom = np.array(["math"] * n)
    return Blocks(dom, dom, accepted, raw, gamma, 0, 0.0), true_p


def test_sts_lowers_ece_of_the_cumulative_product():
    fit_set, _ = synthetic_blocks(20_000, 5, 1)
    test_set, _ = synthetic_blocks(20_000, 5, 2)
    cal = fit_sts(fit_set)
    assert len(cal["temperatures"]) == 5 and all(t > 1.0 for t in cal["temperatures"])
    before = confidence_report(test_set.confidence, test_set.accepted)
    after = confidence_report(sts_apply(test_set.confidence, np.array(cal["temperatures"])), test_set.accepted)
    for k in range(5):
        assert after["ece"][k] < 0.5 * before["ece"][k]
        assert after["auroc"][k] == pytest.approx(before["auroc"][k])


@pytest.mark.heavy
def test_calibration_is_saved_with_the_drafter(smoke_world):
    paths, _, _ = smoke_world
    cal = json.loads((paths.drafter("dspark") / "calibration.json").read_text())
    assert cal["method"] == "sts" and cal["temperature"] == 1.0
    # position 1 has no earlier positions: its grid search (which includes T = 1) cannot make ECE worse
    assert cal["ece_after"][0] <= cal["ece_before"][0] + 1e-12


def test_bfloat16_load_and_draft(smoke_world):
    from dspark_runtime.checkpoints import load_drafter
    from dspark_runtime.corpus import load_corpus
    from dspark_runtime.rollouts import encode_prompts, eval_records
    from dspark_runtime.speculative import SpeculativeDecoder
    from dspark_runtime.target import TargetRunner, load_target

    paths, size, _ = smoke_world
    target, tok = load_target(paths.target, dtype="bfloat16")
    drafter, _ = load_drafter(paths.drafter("dspark"), target=target, dtype="bfloat16")
    assert drafter.fc.weight.dtype == torch.bfloat16 and next(target.parameters()).dtype == torch.bfloat16
    runner = TargetRunner(target, list(size.target_layer_ids))
    prompts = encode_prompts(tok, eval_records(load_corpus(paths.corpus), "eval", 1))
    out, recs = SpeculativeDecoder(runner, drafter, temperature=0.0, eos_id=tok.eos_token_id).generate(prompts, 8)
    assert all(len(o) >= 1 for o in out) and recs

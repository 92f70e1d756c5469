"""STS calibration of a drafter's confidence head on the held-out calibration split.

The calibration set is real: full-block speculative decoding on the calibration prompts (never trained on), at
the evaluation temperature, records the raw confidences c_1..c_gamma and the accepted prefix length of every
block. ``simulator.core.calibration.sts_fit`` then fits one temperature per position, left to right, minimising the ECE
of the cumulative product (paper 3.2.1). The temperatures are saved with the drafter (calibration.json)."""

from __future__ import annotations

from simulator.core.calibration import confidence_report, sts_apply, sts_fit

from .rollouts import Blocks


def fit_sts(blocks: Blocks) -> dict:
    if blocks.confidence is None:
        raise ValueError("the drafter has no confidence head; nothing to calibrate")
    temps = sts_fit(blocks.confidence, blocks.accepted)
    before = confidence_report(blocks.confidence, blocks.accepted)
    after = confidence_report(sts_apply(blocks.confidence, temps), blocks.accepted)
    return {
        "method": "sts", "temperatures": [float(t) for t in temps], "n_blocks": len(blocks.accepted),
        "split": "calib", "ece_before": before["ece"], "ece_after": after["ece"],
    }

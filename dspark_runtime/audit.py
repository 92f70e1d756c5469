"""`dspark audit-lossless`: does drafting + scheduling + verification emit exactly the target's distribution?

Each sample is one request-step in a small Markov world (audit_worlds): the drafter samples a block, its
confidence head reports token-dependent confidences, the simulator's own scheduler picks how many draft tokens
each request verifies, and verify_block runs rejection sampling. The first token every request-step emits must be
distributed as the target's p_1; a chi-square goodness-of-fit test says how well it is.

It also records why a scheduler fails when it does: a lossless scheduler decides whether to verify x_1 without
looking at x_1, so the admission rate must not depend on which token x_1 is (a chi-square test of independence
between x_1 and "x_1 verified"). A scheduler can peek without biasing the output (when p_1 = q_1, say), never the
other way round.

Schedulers (all the simulator's code, none copied):
- dspark: the `dspark` policy (Algorithm 1, greedy with early stop), one step per batch of `requests` requests.
- global: `greedy_prefix_lengths(..., early_stop=False)`, the retrospective search of Appendix A.
- dspark-async: the `dspark-async` policy run as one stream of steps in order, so each step's capacity comes
  from the confidences of two steps before (and the first two steps verify nothing).
- vllm-adaptive, sglang-compact, trtllm-adaptive: the engines' planners (simulator/core/policies/engines.py),
  vllm-adaptive and trtllm-adaptive as one stream of steps (their averages and snapshots carry over), sglang-compact
  per step; the world's SPS curve is their table.
"""

from __future__ import annotations

import json
import sys

import click
import numpy as np
import torch

from dspark_runtime.audit_worlds import CASES, MarkovWorld, draft_blocks, make_world
from dspark_runtime.chi_square import goodness_of_fit, independence
from dspark_runtime.verify import verify_block
from simulator.core.policies import PolicyView, checked_lengths, greedy_prefix_lengths, make_policy
from simulator.errors import UserError

SCHEDULERS = ("dspark", "global", "dspark-async", "vllm-adaptive", "sglang-compact", "trtllm-adaptive")
# the schedulers whose answer is a pure function of the step's confidence matrix (the others keep history)
STATELESS = ("dspark", "global", "sglang-compact")
# Request-steps drafted and verified at once: bounds memory (about 2 * chunk * (gamma+1) * V doubles, under 100 MB
# here) for any --samples.
CHUNK_SAMPLES = 2**18


class StepScheduler:
    """Per-step verification lengths from one of the simulator's schedulers."""

    def __init__(self, name: str, world: MarkovWorld):
        if name not in SCHEDULERS:
            raise UserError(f"--scheduler: unknown scheduler {name!r}; expected one of {', '.join(SCHEDULERS)}")
        self.name = name
        self.world = world
        self.policy = make_policy(name) if name != "global" else None
        # a pure function of the step's confidence matrix (the SPS curve is fixed) schedules each distinct matrix
        # once and the answer is reused; a scheduler with history sees every step.
        self.stateless = name in STATELESS
        self.step = 0

    def _one(self, confidence: np.ndarray) -> np.ndarray:
        w = self.world
        if self.policy is None:
            return greedy_prefix_lengths(confidence, w.sps_of, early_stop=False)
        view = PolicyView(
            confidence=confidence,
            remaining=np.full(w.requests, w.gamma + 1, dtype=np.int64),  # every position may be verified
            context=np.zeros(w.requests, dtype=np.int64),
            sps=w.sps_of,
            gamma=w.gamma,
            step=self.step,
        )
        self.step += 1
        return checked_lengths(self.policy, self.name, self.policy.choose(view), view)

    def lengths(self, confidence: np.ndarray) -> np.ndarray:
        """confidence (steps, requests, gamma) in step order -> lengths (steps, requests)."""
        steps, rows, gamma = confidence.shape
        if self.stateless:
            flat = confidence.reshape(steps, rows * gamma)
            distinct, inverse = np.unique(flat, axis=0, return_inverse=True)
            answers = np.stack([self._one(d.reshape(rows, gamma).copy()) for d in distinct])
            return answers[inverse.ravel()]
        return np.stack([self._one(confidence[s].copy()) for s in range(steps)])


def run_audit(case: str, scheduler: str, samples: int, seed: int = 0) -> dict:
    """Run `samples` request-steps and test the first emitted token against the target. Returns the JSON record."""
    if int(samples) != samples or samples < 1:
        raise UserError(f"--samples: expected a positive integer, got {samples!r}")
    world = make_world(case, seed)
    sched = StepScheduler(scheduler, world)
    gen = torch.Generator().manual_seed(int(seed))
    rows, gamma = world.requests, world.gamma
    steps_total = -(-samples // rows)
    counts = np.zeros(world.vocab, dtype=np.int64)
    admitted = np.zeros((world.vocab, 2), dtype=np.int64)  # [x_1, whether x_1 was verified]
    verified = 0
    done = 0
    chunk_steps = max(1, CHUNK_SAMPLES // rows)
    for start in range(0, steps_total, chunk_steps):
        steps = min(chunk_steps, steps_total - start)
        n = min(steps * rows, samples - done)  # the last step may be cut short of its requests
        blocks = draft_blocks(world, steps * rows, gen)
        lengths = sched.lengths(blocks.confidence.reshape(steps, rows, gamma)).reshape(-1)
        accepted, next_token = verify_block(
            blocks.target_probs, blocks.draft_probs, blocks.tokens, torch.from_numpy(lengths), generator=gen
        )
        first = torch.where(accepted > 0, blocks.tokens[:, 0], next_token)  # worlds have gamma >= 2
        counts += np.bincount(first[:n].numpy(), minlength=world.vocab)
        cell = blocks.tokens[:n, 0].numpy() * 2 + (lengths[:n] > 0)
        admitted += np.bincount(cell, minlength=2 * world.vocab).reshape(world.vocab, 2)
        verified += int(lengths[:n].sum())
        done += n
    return {
        "case": case,
        "scheduler": scheduler,
        "samples": samples,
        "distribution": {str(t): float(c / samples) for t, c in enumerate(counts)},
        "target": {str(t): float(p) for t, p in enumerate(world.p_first)},
        "p_value": goodness_of_fit(counts, world.p_first),
        "seed": seed,
        "world": world.describe(),
        "mean_verified": verified / samples,
        "admission_by_first_draft": {
            str(t): float(row[1] / row.sum()) for t, row in enumerate(admitted) if row.sum() > 0
        },
        "admission_p_value": independence(admitted),
    }


class _OneLineUsageErrors(click.Command):
    """Bad flags print as one line and exit 2, like every other user mistake, instead of click's usage block."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise _UserFacingError(exc.format_message()) from None


class _UserFacingError(click.ClickException):
    exit_code = 2


@click.command("audit-lossless", cls=_OneLineUsageErrors)
@click.option("--case", default="appendix-a", show_default=True, help=f"World to audit: {', '.join(CASES)}.")
@click.option("--scheduler", required=True, help=f"Scheduler: {', '.join(SCHEDULERS)}.")
@click.option("--samples", default=200_000, show_default=True, type=int, help="Request-steps to sample.")
@click.option("--seed", default=0, show_default=True, type=int, help="Sampling seed (and the random world's).")
@click.option("--alpha", default=1e-3, show_default=True, type=click.FloatRange(0.0, 1.0, min_open=True),
              help="Significance level: the audit fails when the goodness-of-fit p-value is below it.")
def audit_lossless(case: str, scheduler: str, samples: int, seed: int, alpha: float) -> None:
    """Check that drafting, scheduling and rejection-sampling verification emit the target's distribution.

    Prints one JSON line (stdout): the first emitted token's distribution, the target's, the chi-square p-value and
    ``lossless`` (p >= alpha); then a one-line verdict (stderr). Exits 1 when the test rejects losslessness."""
    try:
        record = run_audit(case, scheduler, samples, seed)
    except UserError as exc:
        raise _UserFacingError(str(exc)) from None
    record["alpha"] = alpha
    record["lossless"] = bool(record["p_value"] >= alpha)
    click.echo(json.dumps(record))
    p = f"chi-square p = {record['p_value']:.3g}"
    if record["lossless"]:
        click.echo(f"lossless: {scheduler} on {case} emits the target's distribution ({p} >= alpha {alpha:g})",
                   err=True)
    else:
        click.echo(f"NOT lossless: {scheduler} on {case} does not emit the target's distribution ({p} < alpha "
                   f"{alpha:g}; x_1 admission p = {record['admission_p_value']:.3g})", err=True)
        sys.exit(1)

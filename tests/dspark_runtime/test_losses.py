"""The drafter loss against hand computation on tiny tensors."""

from __future__ import annotations

import math

import pytest
import torch

from dspark_runtime.losses import LossWeights, drafter_loss, position_weights


def test_position_weights_are_exp_minus_k_over_4():
    assert position_weights(3, 4.0).tolist() == pytest.approx([1.0, math.exp(-0.25), math.exp(-0.5)])


def test_loss_terms_by_hand():
    # one block, gamma = 3, vocabulary 2; the third position is invalid (past the answer)
    draft = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0], [5.0, -5.0]]])  # p_d: (.5,.5), (.75,.25), whatever
    target = torch.tensor([[[math.log(4.0), 0.0], [0.0, 0.0], [0.0, 9.0]]])  # p_t: (.8,.2), (.5,.5), whatever
    labels = torch.tensor([[0, 1, 0]])
    valid = torch.tensor([[True, True, False]])
    conf = torch.tensor([[0.0, math.log(4.0), 3.0]])  # sigmoid: .5, .8, ignored

    w0, w1 = 1.0, math.exp(-0.25)
    ce = [-math.log(0.5), -math.log(0.25)]
    l1 = [abs(0.5 - 0.8) + abs(0.5 - 0.2), abs(0.75 - 0.5) + abs(0.25 - 0.5)]  # 0.6, 0.5
    c_star = [1 - 0.5 * x for x in l1]  # 0.7, 0.75
    bce = [-(c_star[0] * math.log(0.5) + (1 - c_star[0]) * math.log(0.5)),
           -(c_star[1] * math.log(0.8) + (1 - c_star[1]) * math.log(0.2))]

    def wmean(xs):
        return (w0 * xs[0] + w1 * xs[1]) / (w0 + w1)

    loss, terms = drafter_loss(draft, target, labels, valid, conf)
    assert terms["ce"] == pytest.approx(wmean(ce), rel=1e-5)
    assert terms["l1"] == pytest.approx(wmean(l1), rel=1e-5)
    assert terms["conf"] == pytest.approx(wmean(bce), rel=1e-5)
    assert float(loss) == pytest.approx(0.1 * wmean(ce) + 0.9 * wmean(l1) + 1.0 * wmean(bce), rel=1e-5)

    # no confidence head: the BCE term is absent; other weights apply as given
    loss2, terms2 = drafter_loss(draft, target, labels, valid, None, LossWeights(ce=1.0, l1=0.0))
    assert "conf" not in terms2
    assert float(loss2) == pytest.approx(wmean(ce), rel=1e-5)


def test_confidence_target_is_detached():
    draft = torch.randn(2, 3, 5, requires_grad=True)
    target = torch.randn(2, 3, 5)
    conf = torch.zeros(2, 3, requires_grad=True)
    loss, _ = drafter_loss(draft, target, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool),
                           conf, LossWeights(ce=0.0, l1=0.0, conf=1.0))
    loss.backward()
    assert draft.grad is None or torch.count_nonzero(draft.grad) == 0  # c* carries no gradient into the drafter
    assert torch.count_nonzero(conf.grad) > 0

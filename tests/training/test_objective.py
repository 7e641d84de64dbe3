"""The DIVERSED objective: the regulariser raises acceptance, REINFORCE matches a hand computation."""

from __future__ import annotations

import math

import pytest
import torch

from relaxspec.models.weight_head import WeightHead
from relaxspec.training.objective import RunningBaseline, acceptance, diversed_loss, log_nu, sequence_sum
from relaxspec.verify.ensemble import mixture


def _reg_value(head: WeightHead, hq, hp, tv) -> torch.Tensor:
    return acceptance(head(hq, hp), tv).sum()


def test_regulariser_gradient_raises_expected_acceptance():
    torch.manual_seed(0)
    head = WeightHead(8, 12, init_std=0.3)
    with torch.no_grad():  # start away from the symmetric init so both directions matter
        head.net.weight[1] += 0.2 * torch.randn(20)
    hq, hp = torch.randn(30, 8), torch.randn(30, 12)
    tv = torch.rand(30)
    batch = {"p_y": torch.rand(30), "q_y": torch.rand(30), "tv": tv, "seq_id": torch.zeros(30, dtype=torch.long)}
    # pure regulariser: zero advantage
    parts = diversed_loss(head(hq, hp), batch, torch.zeros(1), reg_lambda=1.0, normalize="sequence")
    head.zero_grad()
    parts.loss.backward()
    grads = [p.grad.clone() for p in head.parameters()]
    with torch.no_grad():
        before = float(_reg_value(head, hq, hp, tv))
    # finite-difference directional derivative along -grad matches autograd and is positive
    eps = 1e-3
    norm2 = sum(float((g * g).sum()) for g in grads)
    with torch.no_grad():
        for p, g in zip(head.parameters(), grads, strict=True):
            p.add_(-eps * g)
        plus = float(_reg_value(head, hq, hp, tv))
        for p, g in zip(head.parameters(), grads, strict=True):
            p.add_(2 * eps * g)
        minus = float(_reg_value(head, hq, hp, tv))
        for p, g in zip(head.parameters(), grads, strict=True):
            p.add_(-eps * g)
    assert plus > before > minus, (minus, before, plus)
    fd = (plus - minus) / (2 * eps)
    assert fd == pytest.approx(norm2, rel=1e-2)  # d reg / d(-eps grad) = |grad|^2 since loss = -reg


def test_reinforce_gradient_matches_hand_computation():
    # one sequence of 3 tokens, explicit target weights and token probabilities
    w = torch.tensor([0.2, 0.5, 0.9], dtype=torch.float64, requires_grad=True)
    p_y = torch.tensor([0.6, 0.1, 0.3], dtype=torch.float64)
    q_y = torch.tensor([0.2, 0.4, 0.3], dtype=torch.float64)
    tv = torch.tensor([0.5, 0.3, 0.1], dtype=torch.float64)
    reward, baseline = 1.0, 0.25
    batch = {"p_y": p_y, "q_y": q_y, "tv": tv, "seq_id": torch.zeros(3, dtype=torch.long),
             "logpi_old": torch.zeros(1, dtype=torch.float64)}
    # importance ratio: pi_old = pi_theta (on-policy)
    with torch.no_grad():
        batch["logpi_old"] = log_nu(w, p_y, q_y).sum().reshape(1)
    parts = diversed_loss(w, batch, torch.tensor([reward - baseline], dtype=torch.float64), reg_lambda=0.0,
                          normalize="sequence")
    parts.loss.backward()
    # by hand: L = -(R - b) * sum_t log(w_t p_t + (1 - w_t) q_t); dL/dw_t = -(R - b) (p_t - q_t) / nu_t
    hand = []
    for wt, pt, qt in ((0.2, 0.6, 0.2), (0.5, 0.1, 0.4), (0.9, 0.3, 0.3)):
        nu = wt * pt + (1 - wt) * qt
        hand.append(-(reward - baseline) * (pt - qt) / nu)
    assert w.grad.tolist() == pytest.approx(hand, rel=1e-12)
    assert hand == pytest.approx([-(0.75) * 0.4 / 0.28, -(0.75) * (-0.3) / 0.25, 0.0])
    # value: -(0.75) * (log .28 + log .25 + log .3)
    assert float(parts.pg_loss) == pytest.approx(-0.75 * (math.log(0.28) + math.log(0.25) + math.log(0.3)))
    # the regulariser with lambda adds -lambda * sum(1 - w tv) and its gradient +lambda * tv
    w2 = w.detach().clone().requires_grad_(True)
    parts2 = diversed_loss(w2, batch, torch.tensor([0.0], dtype=torch.float64), reg_lambda=2.0, normalize="sequence")
    parts2.loss.backward()
    assert w2.grad.tolist() == pytest.approx((2.0 * tv).tolist())
    assert float(parts2.reg) == pytest.approx(float((1 - w.detach() * tv).sum()))


def test_normalisation_and_importance_clip():
    w = torch.full((4,), 0.5, requires_grad=True)
    batch = {"p_y": torch.full((4,), 0.5), "q_y": torch.full((4,), 0.5), "tv": torch.full((4,), 0.2),
             "seq_id": torch.tensor([0, 0, 1, 1]), "logpi_old": torch.tensor([-10.0, 0.0])}
    parts = diversed_loss(w, batch, torch.ones(2), normalize="budget", max_new_tokens=8, importance_clip=2.0)
    # pi/pi_old: exp(2 log .5 + 10) clipped to 2, exp(2 log .5) = .25
    assert parts.ratio.tolist() == pytest.approx([2.0, 0.25])
    assert float(parts.reg) == pytest.approx(4 * 0.9 / 16)
    tok = diversed_loss(w, batch, torch.ones(2), normalize="token")
    assert float(tok.reg) == pytest.approx(0.9)


def test_relative_lambda_has_the_acceptance_raising_sign():
    w = torch.tensor([0.3, 0.7], requires_grad=True)
    batch = {"p_y": torch.tensor([0.9, 0.1]), "q_y": torch.tensor([0.1, 0.9]), "tv": torch.tensor([0.6, 0.6]),
             "seq_id": torch.tensor([0, 0])}
    parts = diversed_loss(w, batch, torch.tensor([-0.5]), reg_lambda=0.05, reg_mode="relative")
    assert parts.reg_lambda > 0
    assert parts.reg_lambda == pytest.approx(0.05 * abs(float(parts.pg_loss)) / float(parts.reg))


def test_logit_mix_from_truncated_cache_matches_exact_geometric_mixture():
    torch.manual_seed(1)
    v, n = 10, 5
    p = torch.softmax(torch.randn(n, v) * 2, -1)
    q = torch.softmax(torch.randn(n, v) * 2, -1)
    w = torch.rand(n)
    y = torch.randint(0, v, (n,))
    ids = torch.sort(torch.cat([torch.topk(p, v).indices, torch.topk(q, v).indices], 1), 1).values
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[:, 1:] = ids[:, 1:] != ids[:, :-1]
    sp, sq = p.gather(1, ids) * mask, q.gather(1, ids) * mask
    trunc = {"sup_p": sp, "sup_q": sq, "sup_mask": mask, "rest_p": (1 - sp.sum(1)).clamp_min(0),
             "rest_q": (1 - sq.sum(1)).clamp_min(0)}
    nu = mixture(p, q, w, "logit")
    exact_logp = torch.log(nu.gather(1, y[:, None])[:, 0])
    got = log_nu(w, p.gather(1, y[:, None])[:, 0], q.gather(1, y[:, None])[:, 0], "logit", trunc)
    assert torch.allclose(got, exact_logp, atol=1e-5)
    exact_acc = torch.minimum(q, nu).sum(-1)
    assert torch.allclose(acceptance(w, torch.zeros(n), "logit", trunc), exact_acc, atol=1e-5)
    # prob mix: sum_x min(q, nu) = 1 - w TV exactly
    nu_p = mixture(p, q, w, "prob")
    tv = 0.5 * (p - q).abs().sum(-1)
    assert torch.allclose(torch.minimum(q, nu_p).sum(-1), acceptance(w, tv), atol=1e-6)


def test_running_baseline_and_sequence_sum():
    b = RunningBaseline(0.9)
    assert b.current(0.4) == 0.4
    b.update(0.4)
    b.update(1.0)
    assert b.value == pytest.approx(0.9 * 0.4 + 0.1)
    c = RunningBaseline(0.5)
    c.load_state_dict(b.state_dict())
    assert c.value == b.value and c.count == 2
    s = sequence_sum(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0, 2, 0]), 3)
    assert s.tolist() == [4.0, 0.0, 2.0]

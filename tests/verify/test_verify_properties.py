"""Properties of the rules: reductions to ``sd``, ensemble acceptance identities, ASD ledger, degenerate inputs."""

from __future__ import annotations

import pytest
import torch

from relaxspec.verify import RULES, VerifyOutput, asd, cascade, diversed, get_rule, lossy, sd, static_ensemble
from relaxspec.verify.base import residual, sample_inverse_cdf
from relaxspec.verify.ensemble import mixture

HP = {
    "sd": {},
    "lossy": {"lenience": 0.5},
    "static_ensemble": {"w_target": 0.5, "mix": "prob"},
    "diversed": {"mix": "logit"},
    "cascade": {"alpha": 0.3, "deferral": "token"},
    "asd": {"budget": 4.0, "gate": 0.5, "cap": 2},
}


def _inputs(seed: int, b: int, k: int, v: int, scale: float = 1.5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    zp = torch.randn(b, k + 1, v, generator=g, dtype=torch.float64) * scale
    zq = zp + torch.randn(b, k + 1, v, generator=g, dtype=torch.float64)
    p, q = zp.softmax(-1).to(dtype), zq.softmax(-1).to(dtype)
    x = torch.multinomial(q[:, :k].reshape(-1, v).double(), 1, generator=g).view(b, k)
    u = torch.rand(b, k + 1, generator=g, dtype=torch.float64)
    return q, p, x, u


def _same(a: VerifyOutput, b: VerifyOutput) -> None:
    assert torch.equal(a.n_accepted, b.n_accepted)
    assert torch.equal(a.next_token, b.next_token)
    assert torch.equal(a.accept_mask, b.accept_mask)
    assert torch.equal(a.accept_prob, b.accept_prob)
    assert torch.equal(a.expected_accept, b.expected_accept)


def _call(name, q, p, x, u, greedy, **extra):
    kw = dict(HP[name])
    kw.update(extra)
    if name == "diversed":
        kw.setdefault("w", torch.full(x.shape[:1] + (x.shape[1] + 1,), 0.6, dtype=torch.float64))
    if name == "asd":
        greedy = True
    return get_rule(name)(q, p, x, u=u, greedy=greedy, **kw)


def _check_sane(out: VerifyOutput, k: int, v: int) -> None:
    for t in (out.accept_prob, out.expected_accept):
        assert torch.isfinite(t).all()
        assert ((t >= 0) & (t <= 1)).all()
    assert ((out.n_accepted >= 0) & (out.n_accepted <= k)).all()
    assert ((out.next_token >= 0) & (out.next_token < v)).all()
    assert torch.equal(out.accept_mask, torch.arange(k) < out.n_accepted[:, None])
    assert out.n_accepted.dtype == torch.long and out.next_token.dtype == torch.long


# --------------------------------------------------------------------------------------------- registry


def test_registry_names_and_unknown_rule():
    assert set(RULES) == {"sd", "lossy", "static_ensemble", "diversed", "cascade", "asd"}
    assert get_rule("sd") is sd
    with pytest.raises(ValueError, match="valid: asd, cascade, diversed, lossy, sd, static_ensemble"):
        get_rule("nope")


@pytest.mark.parametrize("name", sorted(HP))
def test_shape_contract_and_generator_reproducibility(name):
    k, v = 3, 11
    q, p, x, _ = _inputs(0, 16, k, v)
    out1 = _call(name, q, p, x, None, False, generator=torch.Generator().manual_seed(5))
    out2 = _call(name, q, p, x, None, False, generator=torch.Generator().manual_seed(5))
    _same(out1, out2)
    assert out1.accept_prob.shape == (16, k) and out1.expected_accept.shape == (16, k)
    _check_sane(out1, k, v)


def test_bad_shapes_and_hyperparameters_raise():
    q, p, x, u = _inputs(0, 4, 2, 5)
    with pytest.raises(ValueError):
        sd(q, p[:, :2], x)
    with pytest.raises(ValueError):
        sd(q, p, x, u=u[:, :2])
    with pytest.raises(ValueError):
        lossy(q, p, x, lenience=0.0)
    with pytest.raises(ValueError):
        diversed(q, p, x, mix="prob")  # w missing
    with pytest.raises(ValueError):
        static_ensemble(q, p, x, w_target=0.5, mix="geometric")
    with pytest.raises(ValueError):
        cascade(q, p, x, alpha=0.1, deferral="chow")
    with pytest.raises(ValueError):
        asd(q, p, x, budget=1.0, gate=1.0, cap=1)  # greedy=False


@pytest.mark.parametrize("name", sorted(HP))
def test_half_precision_inputs(name):
    q, p, x, u = _inputs(1, 8, 2, 7, dtype=torch.bfloat16)
    _check_sane(_call(name, q, p, x, u, False), 2, 7)


# --------------------------------------------------------------------------------------------- reductions


@pytest.mark.parametrize("greedy", [False, True])
def test_lossy_lenience_one_equals_sd(greedy):
    q, p, x, u = _inputs(2, 2000, 4, 9)
    _same(lossy(q, p, x, u=u, greedy=greedy, lenience=1.0), sd(q, p, x, u=u, greedy=greedy))


def test_lossy_accepts_more_with_smaller_lenience():
    q, p, x, u = _inputs(3, 2000, 4, 9)
    a = lossy(q, p, x, u=u, lenience=1.0)
    b = lossy(q, p, x, u=u, lenience=0.3)
    assert (b.accept_prob >= a.accept_prob).all() and (b.n_accepted >= a.n_accepted).all()
    torch.testing.assert_close(b.accept_prob, (a.accept_prob / 0.3).clamp(max=1.0) * (a.accept_prob < 1) + (a.accept_prob == 1))


@pytest.mark.parametrize("greedy", [False, True])
@pytest.mark.parametrize("bonus_q", [True, False])
def test_static_ensemble_w1_equals_sd(greedy, bonus_q):
    q, p, x, u = _inputs(4, 2000, 3, 9)
    if not bonus_q:
        q = q[:, :3]
    _same(static_ensemble(q, p, x, u=u, greedy=greedy, w_target=1.0, mix="prob"), sd(q, p, x, u=u, greedy=greedy))


@pytest.mark.parametrize("mix", ["prob", "logit"])
def test_static_ensemble_w0_accepts_every_draft(mix):
    k = 4
    q, p, x, u = _inputs(5, 2000, k, 9)
    out = static_ensemble(q, p, x, u=u, w_target=0.0, mix=mix)
    assert (out.n_accepted == k).all()
    torch.testing.assert_close(out.expected_accept, torch.ones_like(out.expected_accept))
    # the bonus then comes from nu_k = q_k: greedy picks argmax q_k
    g = static_ensemble(q, p, q[:, :k].argmax(-1), w_target=0.0, mix=mix, greedy=True)
    assert (g.n_accepted == k).all() and torch.equal(g.next_token, q[:, k].argmax(-1))


@pytest.mark.parametrize("w", [0.0, 0.25, 0.6, 1.0])
def test_static_ensemble_acceptance_is_one_minus_w_tv(w):
    b, k, v = 200_000, 1, 8
    g = torch.Generator().manual_seed(6)
    p1 = torch.randn(v, generator=g, dtype=torch.float64).softmax(-1)
    q1 = torch.randn(v, generator=g, dtype=torch.float64).softmax(-1)
    p = p1.expand(b, k + 1, v)
    q = q1.expand(b, k + 1, v)
    x = torch.multinomial(q1, b, replacement=True, generator=g).view(b, 1)
    tv = 0.5 * (p1 - q1).abs().sum().item()
    out = static_ensemble(q, p, x, generator=g, w_target=w, mix="prob")
    torch.testing.assert_close(out.expected_accept, torch.full((b, k), 1 - w * tv, dtype=torch.float64))
    beta = 1 - w * tv
    rate = out.accept_mask.double().mean().item()
    assert abs(rate - beta) < 5 * (beta * (1 - beta) / b) ** 0.5 + 1e-12
    # mean accept_prob over x ~ q is beta as well
    assert abs(out.accept_prob.mean().item() - beta) < 5 * (beta * (1 - beta) / b) ** 0.5 + 1e-12


def test_static_ensemble_residual_is_independent_of_w():
    q, p, x, u = _inputs(7, 4000, 3, 9)
    outs = [static_ensemble(q, p, x, u=u, w_target=w, mix="prob") for w in (0.2, 0.5, 0.9, 1.0)]
    # Rows rejected at the same position get the same correction token from the same u[:, k].
    for o in outs[:-1]:
        same = (o.n_accepted == outs[-1].n_accepted) & (o.n_accepted < 3)
        assert same.sum() > 100
        assert torch.equal(o.next_token[same], outs[-1].next_token[same])
    # And the normalised (nu - q)_+ equals (p - q)_+ for every w > 0.
    for w in (0.1, 0.5, 0.9):
        nu = mixture(p, q, torch.full(p.shape[:2], w, dtype=p.dtype), "prob")
        torch.testing.assert_close(residual(nu, q), residual(p, q))


def test_diversed_constant_w_equals_static():
    q, p, x, u = _inputs(8, 1000, 3, 9)
    for mix in ("prob", "logit"):
        w = torch.full((1000, 4), 0.3, dtype=torch.float64)
        _same(diversed(q, p, x, u=u, w=w, mix=mix), static_ensemble(q, p, x, u=u, w_target=0.3, mix=mix))


def test_cascade_limits():
    q, p, x, u = _inputs(9, 1000, 3, 9)
    # OPT with a very negative alpha never defers to q: pi = p, i.e. exactly sd.
    _same(cascade(q, p, x, u=u, alpha=-10.0, deferral="opt"), sd(q, p, x, u=u))
    # OPT with a huge alpha always defers to q: everything accepted, bonus from q_k.
    out = cascade(q, p, x, u=u, alpha=1e6, deferral="opt")
    assert (out.n_accepted == 3).all()
    # Token rule with alpha = 1 puts every token in T: pi = q.
    assert (cascade(q, p, x, u=u, alpha=1.0, deferral="token").n_accepted == 3).all()


# --------------------------------------------------------------------------------------------- asd


def _random_greedy_case(seed, b, k, v, ties=False):
    g = torch.Generator().manual_seed(seed)
    zp = torch.randn(b, k + 1, v, generator=g, dtype=torch.float64) * 2
    if ties:  # integer logits: many exact ties for the maximum
        zp = zp.round()
    p = zp.softmax(-1)
    q = (zp + torch.randn(b, k + 1, v, generator=g, dtype=torch.float64)).softmax(-1)
    x = q[:, :k].argmax(-1)
    return q, p, x


@pytest.mark.parametrize("k", [1, 2, 4, 7])
@pytest.mark.parametrize("ties", [False, True])
def test_asd_zero_budget_gate_or_cap_is_strict_greedy(k, ties):
    q, p, x = _random_greedy_case(10 + k, 5000, k, 6, ties)
    ref = sd(q, p, x, greedy=True)
    for hp in (
        {"budget": 0.0, "gate": 10.0, "cap": 5},
        {"budget": 10.0, "gate": 0.0, "cap": 5},
        {"budget": 10.0, "gate": 10.0, "cap": 0},
    ):
        out = asd(q, p, x, greedy=True, **hp)
        assert torch.equal(out.n_accepted, ref.n_accepted)
        assert torch.equal(out.next_token, ref.next_token)
        assert torch.equal(out.accept_mask, ref.accept_mask)
        assert (out.state["spent"] == 0).all()


@pytest.mark.parametrize("value", ["suffix", "normalized_suffix"])
def test_asd_positive_budget_accepts_more_and_respects_ledger(value):
    k, b, budget = 5, 3000, 3.0
    gate = 0.5 if value == "suffix" else 3.0
    state = None
    more = 0
    for rnd in range(6):  # state persists across rounds
        q, p, x = _random_greedy_case(100 + rnd, b, k, 6)
        before = torch.zeros(b, dtype=torch.float64) if state is None else state["spent"].clone()
        out = asd(q, p, x, greedy=True, state=state, budget=budget, gate=gate, cap=2, value=value)
        ref = sd(q, p, x, greedy=True)
        assert (out.n_accepted >= ref.n_accepted).all()
        more += (out.n_accepted > ref.n_accepted).sum().item()
        spent = out.state["spent"]
        assert (spent >= before).all() and (spent <= budget + 1e-9).all()
        # the ledger grows by exactly the regret of the accepted mismatches
        logp = p[:, :k].log()
        regret = logp.amax(-1) - logp.gather(-1, x[..., None]).squeeze(-1)
        mism = out.accept_mask & (x != p[:, :k].argmax(-1))
        torch.testing.assert_close(spent - before, (regret * mism).sum(-1))
        assert (mism.sum(-1) <= 2).all()
        # the emitted token is the target's greedy token where the prefix stopped
        assert torch.equal(out.next_token, p.argmax(-1).gather(-1, out.n_accepted[:, None]).squeeze(-1))
        if state is not None:
            assert state["spent"] is not out.state["spent"]  # input state is not mutated in place
        state = out.state
    assert more > 0
    # rows whose budget is exhausted get no more relaxations of positive regret
    q, p, x = _random_greedy_case(999, b, k, 6)
    full = {"spent": torch.full((b,), budget, dtype=torch.float64)}
    out = asd(q, p, x, greedy=True, state=full, budget=budget, gate=gate, cap=2, value=value)
    assert torch.equal(out.n_accepted, sd(q, p, x, greedy=True).n_accepted)


# --------------------------------------------------------------------------------------------- degenerate


@pytest.mark.parametrize("greedy", [False, True])
@pytest.mark.parametrize("name", sorted(HP))
def test_degenerate_inputs_never_nan(name, greedy):
    k, v, b = 2, 6, 6
    q, p, x, u = _inputs(11, b, k, v)
    q, p = q.clone(), p.clone()
    # row 0: q(x) = 0 on the drafted token, p(x) > 0
    q[0, 0] = torch.tensor([0, 0.5, 0.5, 0, 0, 0], dtype=q.dtype)
    x[0, 0] = 0
    # row 1: one-hot p and q on different tokens
    p[1] = torch.nn.functional.one_hot(torch.tensor([3, 3, 3]), v).double()
    q[1] = torch.nn.functional.one_hot(torch.tensor([1, 1, 1]), v).double()
    x[1] = 1
    # row 2: p == q, one-hot on the drafted token
    p[2] = q[2] = torch.nn.functional.one_hot(torch.tensor([2, 2, 2]), v).double()
    x[2] = 2
    # row 3: p == q (non-degenerate)
    p[3] = q[3]
    # row 4: all-zero rows
    p[4] = 0.0
    q[4] = 0.0
    # row 5: q(x) = 0 and p(x) = 0
    q[5, 0] = torch.tensor([0, 0.5, 0.5, 0, 0, 0], dtype=q.dtype)
    p[5, 0] = torch.tensor([0, 0, 0, 0.5, 0.5, 0], dtype=q.dtype)
    x[5, 0] = 0
    out = _call(name, q, p, x, u, greedy)
    _check_sane(out, k, v)
    if name == "asd" and out.state is not None:
        assert torch.isfinite(out.state["spent"]).all()
    if name == "sd":
        if not greedy:
            assert out.accept_prob[0, 0] == 1.0  # q(x) = 0 < p(x): ratio treated as +inf
            assert out.accept_prob[5, 0] == 0.0  # q(x) = p(x) = 0: rejected
            assert out.next_token[5] in (3, 4)
        assert out.accept_prob[1, 0] == 0.0 and out.next_token[1] == 3
        assert out.n_accepted[2] == k and out.next_token[2] == 2
        if not greedy:
            assert out.n_accepted[3] == k


def test_sample_inverse_cdf_skips_zero_mass_and_handles_edges():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]] * 4 + [[0.0] * 5], dtype=torch.float64)
    u = torch.tensor([0.0, 0.49999, 0.5, 1 - 1e-16, 0.3], dtype=torch.float64)
    tok = sample_inverse_cdf(probs, u)
    assert tok[:4].tolist() == [1, 1, 3, 3]
    assert 0 <= tok[4] < 5


@pytest.mark.parametrize("v", [1024, 1000 + 3 * 256, 151936])
def test_blocked_inverse_cdf_picks_the_flat_cdf_token(v):
    """The two-level sampler (large vocabularies) returns exactly the token of one float64 cumsum."""
    from relaxspec.verify.base import _CDF_BLOCK, _inverse_cdf_flat

    g = torch.Generator().manual_seed(v)
    b = 64
    probs = torch.softmax(torch.randn(b, v, generator=g) * 4, -1)
    probs[probs < 1e-5] = 0.0  # many zero-mass tokens
    probs[1, : v - 1] = 0.0  # all mass on the last token
    probs[2] = 0.0  # no mass at all
    probs[3, _CDF_BLOCK : 3 * _CDF_BLOCK] = 0.0  # whole empty blocks
    probs[4] = 0.0
    probs[4, [5, v - 2]] = torch.tensor([1e-12, 3.0])  # unnormalised, mass in two distant blocks
    u = torch.rand(b, generator=g, dtype=torch.float64)
    u[5], u[6], u[7] = 0.0, 1 - 1e-16, 0.5
    got, want = sample_inverse_cdf(probs, u), _inverse_cdf_flat(probs, u)
    assert torch.equal(got, want)
    assert got[1] == v - 1 and got[2] == v - 1 and got[4] == v - 2
    has_mass = probs.sum(-1) > 0
    assert bool((probs.gather(-1, got[:, None]).squeeze(-1)[has_mass] > 0).all())  # never a zero-mass token

"""Exact-distribution tests: each emitted token of a round is distributed as the rule's verification distribution.

For k = 1..3 and V = 8, B = 100,000 independent rounds share one (p, q) pair; the drafted tokens are drawn from q
inside the test. The first emitted token of a round (x_1 if accepted, else the correction) must follow v_1
(p for ``sd``, nu for the ensembles, pi for cascades), and the bonus token of fully accepted rounds must follow
v_{k+1}. Chi-square goodness of fit (scipy.stats.chisquare) at significance 1e-3, fixed seeds. The expected
distributions are computed here in NumPy, independently of the library.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from relaxspec.verify import cascade, diversed, sd, static_ensemble

B = 100_000
V = 8
ALPHA_SIG = 1e-3
DTYPE = torch.float32


def _dists(seed: int, k: int, same_prefix: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(V, 0.7), size=k + 1)
    q = rng.dirichlet(np.full(V, 0.7), size=k + 1)
    if same_prefix:  # q == p at the drafted positions, so most rounds are fully accepted
        q[:k] = p[:k]
    return p, q


def _nu(p: np.ndarray, q: np.ndarray, w: float, mix: str) -> np.ndarray:
    if mix == "prob":
        return w * p + (1 - w) * q
    g = np.exp(w * np.log(p) + (1 - w) * np.log(q))
    return g / g.sum()


def _pi(p: np.ndarray, q: np.ndarray, alpha: float, deferral: str) -> np.ndarray:
    if deferral == "opt":
        tv = np.clip(q - p, 0, None).sum()
        return q if q.max() >= p.max() - alpha * tv else p
    in_t = p >= (1 - alpha) * p.max()
    eta = q[~in_t].sum()
    return q * in_t + eta * p


def _draw(p: np.ndarray, q: np.ndarray, k: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    pt = torch.tensor(p, dtype=DTYPE).expand(B, k + 1, V).contiguous()
    qt = torch.tensor(q, dtype=DTYPE).expand(B, k + 1, V).contiguous()
    x = torch.stack([torch.multinomial(qt[0, i], B, replacement=True, generator=g) for i in range(k)], dim=1)
    return pt, qt, x, g


def _assert_follows(tokens: torch.Tensor, dist: np.ndarray) -> None:
    n = tokens.numel()
    assert n > 5_000, "too few samples for a meaningful test"
    counts = np.bincount(tokens.numpy(), minlength=V).astype(np.float64)
    dist = np.asarray(dist, dtype=np.float64)
    dist = dist / dist.sum()
    support = dist > 0
    assert counts[~support].sum() == 0, "a zero-probability token was emitted"
    expected = dist[support] * n
    pval = chisquare(counts[support], expected).pvalue
    assert pval > ALPHA_SIG, f"chi-square p-value {pval:.2e}; counts {counts / n}, expected {dist}"


def _rules():
    """(id, call(q, p, x, g, w), v(p_i, q_i, w_i, k)) triples; w_i is the target weight of the position.

    The cascade lenience varies with k (alpha = 0.25 * k) so that k = 1..3 covers several deferral regimes.
    """
    cases = [("sd", lambda q, p, x, g, w: sd(q, p, x, generator=g), lambda p, q, w, k: p)]
    for mix in ("prob", "logit"):
        cases.append(
            (
                f"static_ensemble-{mix}",
                lambda q, p, x, g, w, mix=mix: static_ensemble(q, p, x, generator=g, w_target=0.35, mix=mix),
                lambda p, q, w, k, mix=mix: _nu(p, q, 0.35, mix),
            )
        )
        cases.append(
            (
                f"diversed-{mix}",
                lambda q, p, x, g, w, mix=mix: diversed(q, p, x, generator=g, w=w, mix=mix),
                lambda p, q, w, k, mix=mix: _nu(p, q, w, mix),
            )
        )
    for deferral in ("opt", "token"):
        cases.append(
            (
                f"cascade-{deferral}",
                lambda q, p, x, g, w, d=deferral: cascade(q, p, x, generator=g, alpha=0.25 * x.shape[1], deferral=d),
                lambda p, q, w, k, d=deferral: _pi(p, q, 0.25 * k, d),
            )
        )
    return cases


RULES = _rules()


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("case", RULES, ids=[c[0] for c in RULES])
def test_first_emitted_token(case, k):
    _, call, v = case
    seed = 1000 * k + sum(map(ord, case[0]))
    p, q = _dists(seed, k)
    pt, qt, x, g = _draw(p, q, k, seed)
    w_pos = np.linspace(0.2, 0.9, k + 1)  # diversed: a different target weight per position
    w = torch.tensor(w_pos, dtype=DTYPE).expand(B, k + 1)
    out = call(qt, pt, x, g, w)
    first = torch.where(out.n_accepted >= 1, x[:, 0], out.next_token)
    _assert_follows(first, v(p[0], q[0], w_pos[0], k))
    # The empirical acceptance rate at position 1 matches the returned expected_accept (beta_1).
    beta = out.expected_accept[0, 0].item()
    rate = out.accept_mask[:, 0].double().mean().item()
    assert abs(rate - beta) < 5 * np.sqrt(beta * (1 - beta) / B) + 1e-6


@pytest.mark.parametrize("case", RULES, ids=[c[0] for c in RULES])
def test_bonus_token(case):
    k = 2
    _, call, v = case
    seed = 7 + sum(map(ord, case[0]))
    p, q = _dists(seed, k, same_prefix=True)
    pt, qt, x, g = _draw(p, q, k, seed)
    w_pos = np.linspace(0.3, 0.7, k + 1)
    w = torch.tensor(w_pos, dtype=DTYPE).expand(B, k + 1)
    out = call(qt, pt, x, g, w)
    full = out.n_accepted == k
    _assert_follows(out.next_token[full], v(p[k], q[k], w_pos[k], k))


@pytest.mark.parametrize("rule", ["static_ensemble", "diversed", "cascade"])
def test_bonus_without_draft_bonus_position_comes_from_p(rule):
    k = 2
    p, q = _dists(99, k, same_prefix=True)
    pt, qt, x, g = _draw(p, q, k, 99)
    qk = qt[:, :k]  # no q[:, k]: the bonus falls back to p[:, k]
    w = torch.full((B, k), 0.5, dtype=DTYPE)
    if rule == "static_ensemble":
        out = static_ensemble(qk, pt, x, generator=g, w_target=0.5, mix="prob")
    elif rule == "diversed":
        out = diversed(qk, pt, x, generator=g, w=w, mix="prob")
    else:
        out = cascade(qk, pt, x, generator=g, alpha=0.3, deferral="opt")
    full = out.n_accepted == k
    _assert_follows(out.next_token[full], p[k])


def test_sd_second_token_conditional_on_first_accept():
    """Given x_1 accepted, the token at position 2 follows p_2 (the round keeps going exactly)."""
    k = 2
    p, q = _dists(4242, k)
    pt, qt, x, g = _draw(p, q, k, 4242)
    out = sd(qt, pt, x, generator=g)
    sel = out.n_accepted >= 1
    second = torch.where(out.n_accepted >= 2, x[:, 1], out.next_token)[sel]
    _assert_follows(second, p[1])

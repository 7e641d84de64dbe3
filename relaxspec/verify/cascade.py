"""Speculative cascades (Narasimhan et al., ICLR 2025, arXiv 2405.19261), rule ``cascade``.

METHODS-DIVERSED.md 2.6 / METHODS-VARIANTS.md 6.3. Verify against a deferral-mixed target pi with lossless
speculative-sampling machinery: accept x_i with ``min(1, pi_i(x_i) / q_i(x_i))``, emit a correction from
``norm((pi_i - q_i)_+)`` at the first rejection and a bonus token from ``pi_k``. Each emitted token is distributed
exactly as pi. Two deferral rules, with lenience ``alpha`` (the reference CLI's ``--lenience``; the mapping
alpha = lenience is an assumption, the reference code is lost):

* ``deferral="opt"`` (plug-in optimal, Eq. 10): ``pi = q`` if ``max q >= max p - alpha * TV(p, q)`` else ``pi = p``,
  decided per position, with ``TV = sum_x max(0, q(x) - p(x))``.
* ``deferral="token"`` (token-specific V3, Eq. 15): ``T = {x : p(x) >= (1 - alpha) * max p}``,
  ``eta = sum_{x not in T} q(x)``, ``pi(x) = q(x) * 1[x in T] + eta * p(x)``.

The deferral rules use the distributions they are given (the processed p, q); the paper evaluates them on the
T=1 versions (q_u, p_u), which differ from p, q when temperature/top-k/top-p is applied. In greedy mode the
inputs are the T=1 softmaxes, so both coincide.

Bonus token: exact (``~ pi_k``) needs ``q[:, k]``; if ``q`` has only k positions the bonus is drawn from
``p[:, k]`` (conservative: toward the target).

Greedy analogue: accept x_i iff ``x_i == argmax pi_i`` and emit ``argmax pi`` at the first mismatch
(``argmax pi_k``, or ``argmax p_k`` without ``q[:, k]``, if all pass).

Not covered: the Chow, Diff, V1 and V2 deferral rules.
"""

from __future__ import annotations

import torch
from torch import Tensor

from relaxspec.verify.base import (
    VerifyOutput,
    accept_ratio,
    as_float,
    check_inputs,
    draw_uniforms,
    finish_greedy,
    finish_stochastic,
    gather_token_probs,
    overlap,
)

__all__ = ["DEFERRALS", "cascade", "cascade_target"]

DEFERRALS = ("opt", "token")


def cascade_target(p: Tensor, q: Tensor, *, alpha: float, deferral: str) -> Tensor:
    """Deferral-mixed verification distribution pi.

    Args:
        p (Tensor[..., V]): target probabilities.
        q (Tensor[..., V]): draft probabilities.
        alpha (float): lenience.
        deferral (str): ``"opt"`` or ``"token"``.

    Returns:
        Tensor[..., V]: pi.

    Raises:
        ValueError: for an unknown ``deferral``.
    """
    p_max = p.amax(-1, keepdim=True)
    if deferral == "opt":
        tv = (q - p).clamp(min=0.0).sum(-1, keepdim=True)
        use_q = q.amax(-1, keepdim=True) >= p_max - alpha * tv
        return torch.where(use_q, q, p)
    if deferral == "token":
        in_t = p >= (1.0 - alpha) * p_max
        eta = torch.where(in_t, torch.zeros_like(q), q).sum(-1, keepdim=True)
        return torch.where(in_t, q, torch.zeros_like(q)) + eta * p
    raise ValueError(f"deferral must be one of {DEFERRALS}, got {deferral!r}")


def cascade(
    q: Tensor,
    p: Tensor,
    x: Tensor,
    *,
    u: Tensor | None = None,
    generator: torch.Generator | None = None,
    w: Tensor | None = None,
    greedy: bool = False,
    state: dict[str, Tensor] | None = None,
    alpha: float,
    deferral: str,
) -> VerifyOutput:
    """Speculative-cascade verification against pi.

    Args:
        q (Tensor[B, k, V] or Tensor[B, k+1, V]): draft probabilities; with k+1 positions the bonus is drawn
            exactly from ``pi_k``, otherwise from ``p[:, k]``.
        p (Tensor[B, k+1, V]): target probabilities.
        x (Tensor[B, k] long): drafted tokens.
        u (Tensor[B, k+1] | None): uniforms; ``u[:, :k]`` accept tests, ``u[:, k]`` draws the emitted token.
        generator (torch.Generator | None): draws ``u`` when it is None.
        w (Tensor | None): unused (shared signature).
        greedy (bool): temperature-0 analogue (accept iff ``x == argmax pi``).
        state (dict[str, Tensor] | None): passed through unchanged.
        alpha (float): lenience of the deferral rule.
        deferral (str): ``"opt"`` or ``"token"``.

    Returns:
        VerifyOutput: accepted prefix length, emitted token and acceptance statistics.

    Raises:
        ValueError: for an unknown ``deferral``.
    """
    b, k, _, q_has_bonus = check_inputs(q, p, x)
    if deferral not in DEFERRALS:
        raise ValueError(f"deferral must be one of {DEFERRALS}, got {deferral!r}")
    p, q = as_float(p), as_float(q)
    n = q.shape[1]
    pi = cascade_target(p[:, :n], q, alpha=alpha, deferral=deferral)  # [B, k or k+1, V]
    pi_k, q_k = pi[:, :k], q[:, :k]
    bonus = pi[:, k] if q_has_bonus else p[:, k]
    if greedy:
        candidates = torch.cat([pi_k.argmax(-1), bonus.argmax(-1, keepdim=True)], dim=-1)
        return finish_greedy(x == candidates[:, :k], candidates, state)
    u = draw_uniforms(b, k, u=u, generator=generator, device=p.device)
    accept_prob = accept_ratio(gather_token_probs(pi_k, x), gather_token_probs(q_k, x))
    return finish_stochastic(q_k, u, accept_prob, overlap(q_k, pi_k), pi_k, bonus, state)

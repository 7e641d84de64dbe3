"""Ensemble verification: static ensemble and DIVERSED (Wang et al., AISTATS 2026, arXiv 2604.07622).

METHODS-DIVERSED.md 2.4 (rule ``static_ensemble``) and 2.5 (rule ``diversed``). Verify against the mixture

    nu_i = w_i * p_i + (1 - w_i) * q_i                       (mix="prob", the paper's identity)
    nu_i ∝ exp(w_i * log p_i + (1 - w_i) * log q_i)          (mix="logit", the released training code at T=1)

where ``w_i`` is the **target** weight (the paper's w; the reference CLI's ``draft_ensemble_weights`` is
``1 - w``). Accept x_i with ``min(1, nu_i(x_i) / q_i(x_i))`` (for mix="prob": ``(1 - w) + w * p/q``), emit a
correction from ``norm((nu_i - q_i)_+)`` at the first rejection and a bonus token from ``nu_k``. Each emitted token
is distributed exactly as nu; for mix="prob", ``beta_i = 1 - w_i * TV(p_i, q_i)`` and the residual equals
``norm((p_i - q_i)_+)`` for every ``w_i > 0`` (it is computed that way, which is also numerically cleaner; for
``w_i = 0`` every draft is accepted and the residual is never used). For mix="logit" the residual is
``norm((nu_i - q_i)_+)`` computed from nu, which keeps the output exactly nu.

Zeros in mix="logit": a weight of 0 drops that model's factor entirely (``0 * log 0 := 0``); if p and q have
disjoint support under a weight in (0, 1) the geometric mixture has no mass, and nu falls back to the
probability mixture.

Bonus token: exact (``~ nu_k``) needs the draft distribution at the bonus position, ``q[:, k]`` (one extra draft
step) and ``w[:, k]``. If ``q`` has only k positions the bonus is drawn from ``p[:, k]`` instead; this is the
conservative choice (it moves the bonus token toward the target, never toward the draft).

Greedy analogue [INFERRED in the spec]: with nu built from the T=1 softmaxes, accept x_i iff
``x_i == argmax nu_i`` and emit ``argmax nu`` at the first mismatch (``argmax nu_k``, or ``argmax p_k`` without
``q[:, k]``, if all pass).

DIVERSED's w comes from the ensemble weight head (section 3), evaluated by the decoding loop and passed in ``w``;
``static_ensemble`` is the same rule with w filled with a constant ``w_target``.
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

__all__ = ["MIX_SPACES", "diversed", "mixture", "static_ensemble"]

MIX_SPACES = ("prob", "logit")


def mixture(p: Tensor, q: Tensor, w: Tensor, mix: str) -> Tensor:
    """Ensemble distribution nu of target p and draft q with target weight w.

    Args:
        p (Tensor[..., V]): target probabilities.
        q (Tensor[..., V]): draft probabilities.
        w (Tensor[...]): target weight in ``[0, 1]`` per distribution.
        mix (str): ``"prob"`` (arithmetic mixture) or ``"logit"`` (normalised geometric mixture).

    Returns:
        Tensor[..., V]: nu, never NaN.

    Raises:
        ValueError: for an unknown ``mix``.
    """
    w = w.unsqueeze(-1).to(p.dtype)
    prob_mix = w * p + (1.0 - w) * q
    if mix == "prob":
        return prob_mix
    if mix != "logit":
        raise ValueError(f"mix must be one of {MIX_SPACES}, got {mix!r}")
    zero = torch.zeros((), dtype=p.dtype, device=p.device)
    # 0 * log 0 := 0, so a model with weight 0 does not veto tokens outside its support.
    log_p = torch.where(w > 0, w * torch.log(p.clamp(min=0.0)), zero)
    log_q = torch.where(w < 1, (1.0 - w) * torch.log(q.clamp(min=0.0)), zero)
    z = log_p + log_q
    log_norm = torch.logsumexp(z, dim=-1, keepdim=True)
    ok = torch.isfinite(log_norm)
    nu = torch.exp(z - torch.where(ok, log_norm, torch.zeros_like(log_norm)))
    return torch.where(ok, nu, prob_mix)


def diversed(
    q: Tensor,
    p: Tensor,
    x: Tensor,
    *,
    u: Tensor | None = None,
    generator: torch.Generator | None = None,
    w: Tensor | None = None,
    greedy: bool = False,
    state: dict[str, Tensor] | None = None,
    mix: str,
) -> VerifyOutput:
    """Dynamic ensemble verification (DIVERSED) with per-position target weights ``w``.

    Args:
        q (Tensor[B, k, V] or Tensor[B, k+1, V]): draft probabilities; with k+1 positions the bonus is drawn
            exactly from ``nu_k``, otherwise from ``p[:, k]``.
        p (Tensor[B, k+1, V]): target probabilities.
        x (Tensor[B, k] long): drafted tokens.
        u (Tensor[B, k+1] | None): uniforms; ``u[:, :k]`` accept tests, ``u[:, k]`` draws the emitted token.
        generator (torch.Generator | None): draws ``u`` when it is None.
        w (Tensor[B, k+1] or Tensor[B, k]): per-position TARGET weights in ``[0, 1]`` (clamped into that
            range); required. ``w[:, k]`` is needed only when ``q`` has k+1 positions.
        greedy (bool): temperature-0 analogue (accept iff ``x == argmax nu``).
        state (dict[str, Tensor] | None): passed through unchanged.
        mix (str): ``"prob"`` or ``"logit"`` mixing space.

    Returns:
        VerifyOutput: accepted prefix length, emitted token and acceptance statistics.

    Raises:
        ValueError: if ``w`` is missing or has the wrong shape, or ``mix`` is unknown.
    """
    b, k, _, q_has_bonus = check_inputs(q, p, x)
    if mix not in MIX_SPACES:
        raise ValueError(f"mix must be one of {MIX_SPACES}, got {mix!r}")
    if w is None:
        raise ValueError("diversed needs the per-position target weights w [B, k+1]")
    n_w = k + 1 if q_has_bonus else k
    if w.dim() != 2 or w.shape[0] != b or w.shape[1] < n_w or w.shape[1] > k + 1:
        raise ValueError(f"w must be [B, k+1] (or [B, k] when q has k positions), got {tuple(w.shape)}")
    p, q = as_float(p), as_float(q)
    w = as_float(w).to(p.dtype).clamp(0.0, 1.0)
    n = q.shape[1]
    nu = mixture(p[:, :n], q, w[:, :n], mix)  # [B, k or k+1, V]
    nu_k, q_k, p_k = nu[:, :k], q[:, :k], p[:, :k]
    bonus = nu[:, k] if q_has_bonus else p[:, k]
    if greedy:
        candidates = torch.cat([nu_k.argmax(-1), bonus.argmax(-1, keepdim=True)], dim=-1)
        return finish_greedy(x == candidates[:, :k], candidates, state)
    u = draw_uniforms(b, k, u=u, generator=generator, device=p.device)
    accept_prob = accept_ratio(gather_token_probs(nu_k, x), gather_token_probs(q_k, x))
    residual_v = p_k if mix == "prob" else nu_k
    return finish_stochastic(q_k, u, accept_prob, overlap(q_k, nu_k), residual_v, bonus, state)


def static_ensemble(
    q: Tensor,
    p: Tensor,
    x: Tensor,
    *,
    u: Tensor | None = None,
    generator: torch.Generator | None = None,
    w: Tensor | None = None,
    greedy: bool = False,
    state: dict[str, Tensor] | None = None,
    w_target: float,
    mix: str,
) -> VerifyOutput:
    """Static (training-free) ensemble verification: ``diversed`` with every weight equal to ``w_target``.

    Args:
        q (Tensor[B, k, V] or Tensor[B, k+1, V]): draft probabilities (see ``diversed`` for the bonus).
        p (Tensor[B, k+1, V]): target probabilities.
        x (Tensor[B, k] long): drafted tokens.
        u (Tensor[B, k+1] | None): uniforms; ``u[:, :k]`` accept tests, ``u[:, k]`` draws the emitted token.
        generator (torch.Generator | None): draws ``u`` when it is None.
        w (Tensor | None): ignored; the weight is ``w_target``.
        greedy (bool): temperature-0 analogue (accept iff ``x == argmax nu``).
        state (dict[str, Tensor] | None): passed through unchanged.
        w_target (float): target weight in ``[0, 1]``; 1 reproduces ``sd``, 0 accepts every draft.
        mix (str): ``"prob"`` or ``"logit"`` mixing space.

    Returns:
        VerifyOutput: accepted prefix length, emitted token and acceptance statistics.

    Raises:
        ValueError: if ``w_target`` is outside ``[0, 1]`` or ``mix`` is unknown.
    """
    if not 0.0 <= w_target <= 1.0:
        raise ValueError(f"w_target must be in [0, 1], got {w_target}")
    b, k, _, _ = check_inputs(q, p, x)
    w_full = torch.full((b, k + 1), float(w_target), dtype=as_float(p).dtype, device=p.device)
    return diversed(q, p, x, u=u, generator=generator, w=w_full, greedy=greedy, state=state, mix=mix)

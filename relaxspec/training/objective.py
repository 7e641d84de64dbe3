"""The DIVERSED training objective (METHODS-DIVERSED.md section 4, with the release's bugs fixed).

Per micro-batch of B rollouts y_b ~ pi_theta (sampled from the ensemble policy at the training temperature):

    log nu_t(y_t) = log(w_t p_t(y_t) + (1 - w_t) q_t(y_t))                 (mix="prob"; gradient only through w)
    acc_t         = sum_x min(q_t, nu_t) = 1 - w_t TV(p_t, q_t)            (mix="prob", exact)
    L = -(1/D) sum_b rho_b (R_b - b) sum_t log nu_t(y_t)  -  lambda (1/D) sum_b sum_t acc_t

* b is a running-mean baseline (updated after each micro-batch, so it never depends on the batch it scores,
  except the very first batch, which uses its own mean).
* rho_b = min(pi_theta(y_b) / pi_old(y_b), clip), detached: 1 for on-policy data; corrects rollouts that are
  reused after the head moved (later micro-batches of a round, extra epochs over one round's rollouts).
* lambda >= 0 and the regulariser enters with a MINUS sign, so descending L raises expected acceptance (the
  release's adaptive scale came out negative and lowered it). ``reg_mode=relative`` uses
  lambda_eff = reg_lambda * |L_pg| / |L_reg| (the release's "5 % of the policy loss" idea with the right sign;
  reg_lambda itself when |L_pg| ~ 0).
* D (``normalize``): ``budget`` (default) = B * max_new_tokens, a constant, so the policy term stays the
  unbiased sequence-level score-function estimator and the regulariser reads as acceptance per token of
  budget; ``sequence`` = B (plain sums per sequence); ``token`` = number of generated tokens in the batch
  (per-token mean; data-dependent, so slightly biased for the policy term).

mix="logit" (nu proportional to p^w q^(1-w), the released training code) is supported from the pair cache's
truncated distributions: the support S = top-k(p) u top-k(q) plus one "rest" bucket holding the remaining mass
(rest_p^w rest_q^(1-w) by Hoelder's bound). log nu(y) uses the exact p(y), q(y); the normaliser and the
acceptance sum_x min(q, nu) are computed on S + rest (an approximation, exact when top_k_store covers the
vocabulary). Train and decode in the same space (the head's meta records it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "RunningBaseline",
    "acceptance",
    "diversed_loss",
    "log_nu",
    "sequence_sum",
]

_TINY = 1e-30


def _log_z_logit(w: Tensor, sup_p: Tensor, sup_q: Tensor, sup_mask: Tensor, rest_p: Tensor, rest_q: Tensor) -> Tensor:
    """log of the geometric-mixture normaliser on the stored support + rest bucket, ``[N]``."""
    wc = w[:, None]
    z = wc * torch.log(sup_p.clamp_min(_TINY)) + (1 - wc) * torch.log(sup_q.clamp_min(_TINY))
    z = z.masked_fill(~sup_mask, float("-inf"))
    rest = w * torch.log(rest_p.clamp_min(_TINY)) + (1 - w) * torch.log(rest_q.clamp_min(_TINY))
    return torch.logsumexp(torch.cat([z, rest[:, None]], dim=1), dim=1)


def log_nu(w: Tensor, p_y: Tensor, q_y: Tensor, mix: str = "prob", trunc: dict[str, Tensor] | None = None) -> Tensor:
    """log nu_t(y_t) per token ``[N]`` from the target weight ``w[N]`` and the sampled token's p and q."""
    if mix == "prob":
        return torch.log((w * p_y + (1 - w) * q_y).clamp_min(_TINY))
    if mix != "logit":
        raise ValueError(f"mix must be 'prob' or 'logit', got {mix!r}")
    if trunc is None:
        raise ValueError("mix='logit' needs the truncated distributions of the pair cache (trainer.top_k_store > 0)")
    z_y = w * torch.log(p_y.clamp_min(_TINY)) + (1 - w) * torch.log(q_y.clamp_min(_TINY))
    return z_y - _log_z_logit(w, trunc["sup_p"], trunc["sup_q"], trunc["sup_mask"], trunc["rest_p"], trunc["rest_q"])


def acceptance(w: Tensor, tv: Tensor, mix: str = "prob", trunc: dict[str, Tensor] | None = None) -> Tensor:
    """Per-token SD acceptance probability of drafts from q against nu: sum_x min(q_t, nu_t), ``[N]``."""
    if mix == "prob":
        return 1 - w * tv
    if trunc is None:
        raise ValueError("mix='logit' needs the truncated distributions of the pair cache (trainer.top_k_store > 0)")
    sup_p, sup_q, mask = trunc["sup_p"], trunc["sup_q"], trunc["sup_mask"]
    log_z = _log_z_logit(w, sup_p, sup_q, mask, trunc["rest_p"], trunc["rest_q"])
    wc = w[:, None]
    nu = torch.exp(wc * torch.log(sup_p.clamp_min(_TINY)) + (1 - wc) * torch.log(sup_q.clamp_min(_TINY))
                   - log_z[:, None]) * mask
    rest_nu = torch.exp(w * torch.log(trunc["rest_p"].clamp_min(_TINY))
                        + (1 - w) * torch.log(trunc["rest_q"].clamp_min(_TINY)) - log_z)
    return (torch.minimum(sup_q, nu) * mask).sum(1) + torch.minimum(trunc["rest_q"], rest_nu)


def sequence_sum(values: Tensor, seq_id: Tensor, n_seq: int) -> Tensor:
    """Sum per sequence of per-token ``values[N]`` with ``seq_id[N]`` in ``[0, n_seq)``: ``[n_seq]``."""
    return torch.zeros(n_seq, dtype=values.dtype, device=values.device).index_add(0, seq_id, values)


class RunningBaseline:
    """Exponential running mean of the reward: b <- m b + (1 - m) mean(R); the first batch sets b = mean(R)."""

    def __init__(self, momentum: float = 0.9, value: float | None = None, count: int = 0):
        self.momentum = float(momentum)
        self.value = value
        self.count = count

    def current(self, batch_mean: float) -> float:
        """Baseline to score a batch with (its own mean for the very first batch)."""
        return batch_mean if self.value is None else self.value

    def update(self, batch_mean: float) -> None:
        self.value = batch_mean if self.value is None else self.momentum * self.value + (1 - self.momentum) * batch_mean
        self.count += 1

    def state_dict(self) -> dict[str, Any]:
        return {"momentum": self.momentum, "value": self.value, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.momentum, self.value, self.count = float(state["momentum"]), state["value"], int(state["count"])


@dataclass
class LossParts:
    loss: Tensor
    pg_loss: Tensor
    reg: Tensor
    reg_lambda: float
    logpi: Tensor          # [B] sum_t log nu_t(y_t)
    ratio: Tensor          # [B] clipped importance weights (detached)
    accept_mean: float     # mean per-token acceptance estimate
    n_tokens: int


def diversed_loss(
    w: Tensor,
    batch: dict[str, Tensor],
    advantages: Tensor,
    *,
    mix: str = "prob",
    reg_lambda: float = 1.0,
    reg_mode: str = "fixed",
    normalize: str = "budget",
    max_new_tokens: int = 1,
    importance_clip: float = 2.0,
) -> LossParts:
    """REINFORCE + acceptance regulariser on one micro-batch.

    Args:
        w: target weights ``[N]`` from the head (the only thing with a gradient).
        batch: ``p_y, q_y, tv [N]``, ``seq_id [N]`` long, ``logpi_old [B]``; for mix="logit" also
            ``sup_p, sup_q [N, S]``, ``sup_mask [N, S]`` bool, ``rest_p, rest_q [N]``.
        advantages: ``R_b - baseline``, ``[B]``.
        mix, reg_lambda, reg_mode, normalize, max_new_tokens, importance_clip: see the module docstring.
    """
    seq_id = batch["seq_id"]
    n_seq = int(advantages.shape[0])
    trunc = None
    if mix == "logit":
        trunc = {k: batch[k] for k in ("sup_p", "sup_q", "sup_mask", "rest_p", "rest_q")}
    tok_logp = log_nu(w, batch["p_y"], batch["q_y"], mix, trunc)
    logpi = sequence_sum(tok_logp, seq_id, n_seq)
    old = batch.get("logpi_old")
    if old is None:
        ratio = torch.ones_like(logpi)
    else:
        ratio = torch.exp((logpi.detach() - old).clamp(max=30.0)).clamp(max=importance_clip)
    acc = acceptance(w, batch["tv"], mix, trunc)
    n_tok = int(w.shape[0])
    if normalize == "budget":
        denom = float(n_seq * max_new_tokens)
    elif normalize == "sequence":
        denom = float(n_seq)
    elif normalize == "token":
        denom = float(max(n_tok, 1))
    else:
        raise ValueError(f"normalize must be budget|sequence|token, got {normalize!r}")
    adv = advantages.to(logpi.dtype)
    pg_loss = -(ratio * adv * logpi).sum() / denom
    reg = acc.sum() / denom
    lam = float(reg_lambda)
    if reg_mode == "relative":
        pg_abs, reg_abs = float(pg_loss.detach().abs()), float(reg.detach().abs())
        lam = reg_lambda * pg_abs / (reg_abs + 1e-8) if pg_abs > 1e-8 else float(reg_lambda)
    elif reg_mode != "fixed":
        raise ValueError(f"reg_mode must be fixed|relative, got {reg_mode!r}")
    loss = pg_loss - lam * reg
    return LossParts(loss=loss, pg_loss=pg_loss.detach(), reg=reg.detach(), reg_lambda=lam, logpi=logpi.detach(),
                     ratio=ratio.detach(), accept_mean=float(acc.detach().mean()) if n_tok else 0.0, n_tokens=n_tok)

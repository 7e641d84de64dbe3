"""Shared pieces of the verification rules: the output record and the batched rejection-sampling round.

Every rule in :mod:`relaxspec.verify` implements one draft-verify round (METHODS-DIVERSED.md section 1,
Leviathan et al. 2023, Chen et al. 2023): for positions i = 0..k-1 accept the drafted token x_i with
probability ``min(1, v_i(x_i) / q_i(x_i))``, stop at the first rejection and emit a token from the residual
``norm((v_i - q_i)_+)``, or emit a bonus token from ``v_k`` when all k drafts pass. The rules differ only in
the verification distribution v (p for ``sd``, nu for the ensembles, pi for cascades, ...). This module holds
the parts they share, all batched over the rows B (no Python loop over rows or vocabulary).

Variable names match the papers: ``q`` draft probabilities, ``p`` target probabilities, ``x`` drafted tokens,
``k`` draft length (gamma in the papers), ``V`` vocabulary size.

Conventions fixed here and used by every rule:

* **Uniforms.** ``u`` is ``[B, k+1]`` in ``[0, 1)``. ``u[:, i]`` (i < k) is the accept test of position i:
  x_i is accepted iff ``u[:, i] < accept_prob[:, i]`` (strict, so probability 0 never and probability 1 always
  accepts). ``u[:, k]`` draws the emitted token (correction or bonus) by inverse CDF over the chosen
  distribution. One uniform per position is consumed whether or not the position is reached, so the same ``u``
  gives the same outputs across rules. When ``u`` is None it is drawn as ``torch.rand((B, k+1))`` from
  ``generator``. Greedy mode consumes no randomness.
* **q(x) = 0 on a drafted token** (impossible for a real draft, possible with bad inputs): the ratio v/q is
  treated as +inf, so the token is accepted with probability 1 if ``v(x) > 0`` and 0 if ``v(x) = 0``.
* **Empty residual.** ``norm((v - q)_+)`` falls back to ``norm(v)`` when the residual mass is 0, and to the
  uniform distribution when v has no mass either. Nothing here can produce NaN.
* **Precision.** Half-precision inputs are promoted to float32; float64 inputs stay float64. The inverse-CDF
  cumulative sum runs in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "VerifyOutput",
    "accept_ratio",
    "as_float",
    "check_inputs",
    "draw_uniforms",
    "finish_greedy",
    "finish_stochastic",
    "gather_token_probs",
    "overlap",
    "prefix_accept",
    "residual",
    "safe_normalize",
    "sample_inverse_cdf",
]


@dataclass
class VerifyOutput:
    """Result of verifying one round of k drafted tokens for B rows.

    Attributes:
        n_accepted (Tensor[B] long): number of drafted tokens accepted (length of the accepted prefix).
        next_token (Tensor[B] long): the emitted token at position ``n_accepted``: the correction drawn from
            the residual when ``n_accepted < k``, the bonus token when ``n_accepted == k``.
        accept_mask (Tensor[B, k] bool): True exactly for positions ``< n_accepted``.
        accept_prob (Tensor[B, k] float): probability with which the drafted token x_i was, or would have been,
            accepted at position i, ``min(1, v_i(x_i) / q_i(x_i))`` (0/1 in greedy mode).
        expected_accept (Tensor[B, k] float): ``beta_i = sum_x min(q_i(x), v_i(x)) = 1 - TV(q_i, v_i)``, the
            acceptance probability averaged over x ~ q_i (greedy: equal to ``accept_prob``).
        state (dict[str, Tensor] | None): per-row state to pass to the next round (``asd``: ``{"spent": [B]}``);
            other rules return the ``state`` they were given unchanged.
    """

    n_accepted: Tensor
    next_token: Tensor
    accept_mask: Tensor
    accept_prob: Tensor
    expected_accept: Tensor
    state: dict[str, Tensor] | None = None


def as_float(t: Tensor) -> Tensor:
    """Promote a tensor to at least float32 (float64 stays float64) and zero out NaN/inf entries.

    NaN/inf probabilities (from NaN/inf logits) are treated as 0, so a fully NaN row behaves like a row with
    no mass (see the empty-residual convention): no rule ever emits NaN.

    Args:
        t (Tensor): any floating tensor.

    Returns:
        Tensor: ``t`` in float32 (or float64 if it was), with non-finite entries replaced by 0.
    """
    t = t if t.dtype in (torch.float32, torch.float64) else t.float()
    return torch.nan_to_num(t, nan=0.0, posinf=0.0, neginf=0.0)


def check_inputs(q: Tensor, p: Tensor, x: Tensor) -> tuple[int, int, int, bool]:
    """Validate the shared shapes of a rule's inputs.

    Args:
        q (Tensor[B, k, V] or Tensor[B, k+1, V]): draft probabilities.
        p (Tensor[B, k+1, V]): target probabilities.
        x (Tensor[B, k] long): drafted tokens.

    Returns:
        tuple[int, int, int, bool]: ``(B, k, V, q_has_bonus)``, where ``q_has_bonus`` says whether ``q`` also
        holds the draft distribution at the bonus position k.

    Raises:
        ValueError: on inconsistent shapes.
    """
    if p.dim() != 3 or q.dim() != 3 or x.dim() != 2:
        raise ValueError(f"expected q [B,k(+1),V], p [B,k+1,V], x [B,k]; got {tuple(q.shape)}, {tuple(p.shape)}, {tuple(x.shape)}")
    b, k = x.shape
    if p.shape[0] != b or p.shape[1] != k + 1:
        raise ValueError(f"p must be [B, k+1, V] = [{b}, {k + 1}, V], got {tuple(p.shape)}")
    if q.shape[0] != b or q.shape[1] not in (k, k + 1) or q.shape[2] != p.shape[2]:
        raise ValueError(f"q must be [B, k, V] or [B, k+1, V] with V={p.shape[2]}, got {tuple(q.shape)}")
    return b, k, p.shape[2], q.shape[1] == k + 1


def draw_uniforms(
    b: int, k: int, *, u: Tensor | None, generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """Return the ``[B, k+1]`` uniforms of a round, drawing them from ``generator`` when ``u`` is None.

    Args:
        b (int): batch size B.
        k (int): number of drafted tokens.
        u (Tensor[B, k+1] | None): caller-supplied uniforms in ``[0, 1)``.
        generator (torch.Generator | None): source of randomness when ``u`` is None (global RNG if None).
        device (torch.device): device of the returned tensor.

    Returns:
        Tensor[B, k+1] float: the uniforms.
    """
    if u is not None:
        if tuple(u.shape) != (b, k + 1):
            raise ValueError(f"u must be [B, k+1] = [{b}, {k + 1}], got {tuple(u.shape)}")
        return u.to(device)
    gen_device = generator.device if generator is not None else device
    return torch.rand((b, k + 1), generator=generator, device=gen_device, dtype=torch.float64).to(device)


def gather_token_probs(probs: Tensor, x: Tensor) -> Tensor:
    """Probability each position's distribution gives to its drafted token.

    Args:
        probs (Tensor[B, k, V]): distributions at the drafted positions.
        x (Tensor[B, k] long): drafted tokens.

    Returns:
        Tensor[B, k]: ``probs[b, i, x[b, i]]``.
    """
    return probs.gather(-1, x.unsqueeze(-1)).squeeze(-1)


def accept_ratio(v_x: Tensor, q_x: Tensor) -> Tensor:
    """Acceptance probability ``min(1, v(x) / q(x))`` with the q(x) = 0 guard.

    Args:
        v_x (Tensor[...]): verification mass of the drafted token (need not come from a normalised v).
        q_x (Tensor[...]): draft probability of the drafted token.

    Returns:
        Tensor[...]: acceptance probability in ``[0, 1]``; where ``q_x == 0`` it is 1 if ``v_x > 0`` else 0.
    """
    ratio = v_x / torch.where(q_x > 0, q_x, torch.ones_like(q_x))
    ratio = torch.where(q_x > 0, ratio, (v_x > 0).to(ratio.dtype))
    return ratio.clamp(0.0, 1.0)


def overlap(q: Tensor, v: Tensor) -> Tensor:
    """Expected acceptance ``beta = sum_x min(q(x), v(x))`` (= ``1 - TV(q, v)`` for normalised q, v).

    Args:
        q (Tensor[..., V]): draft distribution.
        v (Tensor[..., V]): verification mass (for lossy rules an unnormalised ``p / l``).

    Returns:
        Tensor[...]: beta, clamped to ``[0, 1]``.
    """
    return torch.minimum(q, v).sum(-1).clamp(0.0, 1.0)


def prefix_accept(accepted: Tensor) -> tuple[Tensor, Tensor]:
    """Turn per-position accept decisions into an accepted prefix.

    Args:
        accepted (Tensor[B, k] bool): per-position outcome of the accept test.

    Returns:
        tuple[Tensor, Tensor]: ``n_accepted`` (Tensor[B] long, the length of the leading run of True) and
        ``accept_mask`` (Tensor[B, k] bool, True exactly for positions ``< n_accepted``).
    """
    mask = accepted.to(torch.long).cumprod(dim=-1).to(torch.bool)
    return mask.sum(-1), mask


def safe_normalize(r: Tensor, fallback: Tensor | None = None) -> Tensor:
    """Normalise non-negative mass along the last dim, falling back where the mass is 0.

    Args:
        r (Tensor[..., V]): non-negative mass.
        fallback (Tensor[..., V] | None): used (itself safely normalised) where ``r`` has no mass; the
            uniform distribution when None or when it has no mass either.

    Returns:
        Tensor[..., V]: a probability distribution per row, never NaN.
    """
    mass = r.sum(-1, keepdim=True)
    if fallback is None:
        fb = torch.full_like(r, 1.0 / r.shape[-1])
    else:
        fb = safe_normalize(fallback.clamp(min=0.0), None)
    return torch.where(mass > 0, r / torch.where(mass > 0, mass, torch.ones_like(mass)), fb)


def residual(v: Tensor, q: Tensor) -> Tensor:
    """Residual distribution ``norm((v - q)_+)``, falling back to ``norm(v)`` when the residual mass is 0.

    Args:
        v (Tensor[..., V]): verification distribution.
        q (Tensor[..., V]): draft distribution.

    Returns:
        Tensor[..., V]: the normalised residual.
    """
    return safe_normalize((v - q).clamp(min=0.0), v)


_CDF_BLOCK = 256


def sample_inverse_cdf(probs: Tensor, u: Tensor) -> Tensor:
    """Draw one token per row by inverse CDF: the first index whose cumulative mass exceeds ``u * total``.

    Zero-probability tokens are never returned (except for a row with no mass at all, which returns V-1).
    ``probs`` need not be normalised. Two levels, so a 152k vocabulary is read once instead of being
    cumsummed in float64: float64 sums of blocks of ``_CDF_BLOCK`` tokens, inverse CDF over the block sums,
    then over the chosen block's tokens (the same token the flat float64 cumsum would pick, up to float64
    rounding of the partial sums).

    Args:
        probs (Tensor[B, V]): non-negative mass per row (negative entries count as 0).
        u (Tensor[B]): uniforms in ``[0, 1)``.

    Returns:
        Tensor[B] long: sampled token ids.
    """
    b, v = probs.shape
    blk = _CDF_BLOCK
    if v < 4 * blk:
        return _inverse_cdf_flat(probs, u)
    nb_full = v // blk
    main = probs[:, : nb_full * blk].reshape(b, nb_full, blk)  # a view: rows are contiguous
    sums = [main.clamp(min=0).sum(-1, dtype=torch.float64)]
    if v > nb_full * blk:
        sums.append(probs[:, nb_full * blk :].clamp(min=0).sum(-1, dtype=torch.float64, keepdim=True))
    bsum = torch.cat(sums, dim=1) if len(sums) > 1 else sums[0]  # [B, nb]
    bcdf = bsum.cumsum(-1)
    t = u.to(torch.float64) * bcdf[:, -1]
    nb = bsum.shape[1]
    # right=True lands on a block with mass, except when rounding puts t on the total (past the last block with
    # mass, clamped into trailing empty blocks): only then, as in `_inverse_cdf_flat`, take the last block with mass
    blk_idx = torch.searchsorted(bcdf, t.unsqueeze(-1), right=True).squeeze(-1).clamp(max=nb - 1)
    empty = bsum.gather(-1, blk_idx.unsqueeze(-1)).squeeze(-1) <= 0
    if bool(empty.any()):
        last_with_mass = nb - 1 - (bsum > 0).flip(-1).to(torch.long).argmax(-1)
        blk_idx = torch.where(empty, last_with_mass, blk_idx)
    before = bcdf.gather(-1, blk_idx.unsqueeze(-1)).squeeze(-1) - bsum.gather(-1, blk_idx.unsqueeze(-1)).squeeze(-1)
    start = blk_idx * blk
    cols = start.unsqueeze(-1) + torch.arange(blk, device=probs.device)  # the chosen block's columns
    inside = cols < v
    chunk = probs.gather(-1, cols.clamp(max=v - 1)).to(torch.float64).clamp(min=0) * inside
    # the remaining mass inside the chosen block, renormalised to a fresh uniform-like position
    mass = chunk.sum(-1)
    frac = ((t - before) / mass.clamp(min=torch.finfo(torch.float64).tiny)).clamp(0.0, 1.0 - 1e-16)
    frac = torch.where(mass > 0, frac, torch.zeros_like(frac))
    local = _inverse_cdf_flat(chunk, frac)
    idx = start + local
    no_mass = bcdf[:, -1] <= 0
    if bool(no_mass.any()):
        idx = torch.where(no_mass, torch.full_like(idx, v - 1), idx)
    return idx


def _inverse_cdf_flat(probs: Tensor, u: Tensor) -> Tensor:
    """`sample_inverse_cdf` with one float64 cumsum over the whole row (small vocabularies, single blocks)."""
    cdf = probs.to(torch.float64).clamp(min=0.0).cumsum(-1)
    t = (u.to(torch.float64) * cdf[:, -1]).unsqueeze(-1)
    v = probs.shape[-1]
    idx = torch.searchsorted(cdf, t, right=True).squeeze(-1).clamp(max=v - 1)
    # Rounding can push t onto the total (past the last token with mass): only then (rare, or a row without
    # mass) look for the last token with mass, so the common case is one cumsum and one binary search.
    bad = probs.gather(-1, idx.unsqueeze(-1)).squeeze(-1) <= 0
    if bool(bad.any()):
        last_nonzero = v - 1 - (probs[bad] > 0).flip(-1).to(torch.long).argmax(-1)
        idx = idx.clone()
        idx[bad] = torch.minimum(idx[bad], last_nonzero)
    return idx


def finish_stochastic(
    q_k: Tensor,
    u: Tensor,
    accept_prob: Tensor,
    expected_accept: Tensor,
    residual_v: Tensor,
    bonus: Tensor,
    state: dict[str, Tensor] | None,
) -> VerifyOutput:
    """Run the accept tests, cut the prefix and draw the emitted token (stochastic mode).

    Args:
        q_k (Tensor[B, k, V]): draft distributions at the drafted positions.
        u (Tensor[B, k+1]): uniforms (see the module docstring for how they are consumed).
        accept_prob (Tensor[B, k]): ``min(1, v_i(x_i) / q_i(x_i))``.
        expected_accept (Tensor[B, k]): ``beta_i``.
        residual_v (Tensor[B, k, V]): the v whose residual ``norm((v - q)_+)`` gives the correction token.
        bonus (Tensor[B, V]): distribution of the bonus token (used when all k drafts are accepted).
        state (dict[str, Tensor] | None): passed through to the output.

    Returns:
        VerifyOutput: the round's outcome.
    """
    b, k = accept_prob.shape
    n_accepted, mask = prefix_accept(u[:, :k] < accept_prob)
    dist = safe_normalize(bonus.clamp(min=0.0), None)
    if k > 0:
        rows = torch.arange(b, device=q_k.device)
        j = n_accepted.clamp(max=k - 1)
        correction = residual(residual_v[rows, j], q_k[rows, j])
        dist = torch.where((n_accepted < k).unsqueeze(-1), correction, dist)
    next_token = sample_inverse_cdf(dist, u[:, k])
    return VerifyOutput(n_accepted, next_token, mask, accept_prob, expected_accept, state)


def finish_greedy(accepted: Tensor, candidates: Tensor, state: dict[str, Tensor] | None) -> VerifyOutput:
    """Cut the prefix and pick the emitted token (greedy mode).

    Args:
        accepted (Tensor[B, k] bool): whether each drafted token passes the deterministic test.
        candidates (Tensor[B, k+1] long): token to emit if the prefix stops at position i (i < k: the
            correction, i = k: the bonus), e.g. ``argmax v_i``.
        state (dict[str, Tensor] | None): passed through to the output.

    Returns:
        VerifyOutput: the round's outcome; ``accept_prob`` and ``expected_accept`` are ``accepted`` as 0/1.
    """
    n_accepted, mask = prefix_accept(accepted)
    next_token = candidates.gather(-1, n_accepted.unsqueeze(-1)).squeeze(-1)
    prob = accepted.to(torch.float32)
    return VerifyOutput(n_accepted, next_token, mask, prob, prob.clone(), state)

"""Standard speculative sampling (Leviathan et al. 2023, Alg. 1; Chen et al. 2023, Alg. 2), rule ``sd``.

Verification distribution v_i = p_i (METHODS-DIVERSED.md 2.1): accept x_i with ``min(1, p_i(x_i) / q_i(x_i))``,
emit a correction from ``norm((p_i - q_i)_+)`` at the first rejection, or a bonus token from ``p_k`` when all k
drafts pass. The emitted sequence is distributed exactly as the target p. ``beta_i = 1 - TV(p_i, q_i)``.

Greedy mode (2.2): accept the longest prefix with ``x_i == argmax p_i`` and emit ``argmax p`` at the first
mismatch (``argmax p_k`` if all match), which reproduces greedy decoding of the target token for token.

Variable names match the papers: p target, q draft, x drafted tokens, k draft length.
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

__all__ = ["sd"]


def sd(
    q: Tensor,
    p: Tensor,
    x: Tensor,
    *,
    u: Tensor | None = None,
    generator: torch.Generator | None = None,
    w: Tensor | None = None,
    greedy: bool = False,
    state: dict[str, Tensor] | None = None,
) -> VerifyOutput:
    """Lossless speculative sampling.

    Args:
        q (Tensor[B, k, V] or Tensor[B, k+1, V]): draft probabilities (``q[:, k]``, if present, is unused).
        p (Tensor[B, k+1, V]): target probabilities.
        x (Tensor[B, k] long): drafted tokens.
        u (Tensor[B, k+1] | None): uniforms; ``u[:, :k]`` accept tests, ``u[:, k]`` draws the emitted token.
        generator (torch.Generator | None): draws ``u`` when it is None.
        w (Tensor | None): unused (shared signature).
        greedy (bool): temperature-0 rule (``p``, ``q`` are T=1 softmaxes, ``u`` unused).
        state (dict[str, Tensor] | None): passed through unchanged.

    Returns:
        VerifyOutput: accepted prefix length, emitted token and acceptance statistics.
    """
    b, k, _, _ = check_inputs(q, p, x)
    p, q = as_float(p), as_float(q)
    q_k, p_k = q[:, :k], p[:, :k]
    if greedy:
        p_star = p.argmax(-1)
        return finish_greedy(x == p_star[:, :k], p_star, state)
    u = draw_uniforms(b, k, u=u, generator=generator, device=p.device)
    accept_prob = accept_ratio(gather_token_probs(p_k, x), gather_token_probs(q_k, x))
    return finish_stochastic(q_k, u, accept_prob, overlap(q_k, p_k), p_k, p[:, k], state)

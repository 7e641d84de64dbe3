"""Lossy speculative sampling with lenience (Leviathan et al. 2023, App. A.5; Tran-Thien 2023), rule ``lossy``.

METHODS-DIVERSED.md 2.3 / METHODS-VARIANTS.md 6.1. With lenience ``l in (0, 1]`` accept x_i with
``min(1, p_i(x_i) / (l * q_i(x_i)))``; at the first rejection emit a correction from the plain residual
``norm((p_i - q_i)_+)`` (the beta = 1 choice of the residual family ``norm((p - q/beta)_+)``); the bonus token
comes from ``p_k``. ``l = 1`` is exactly ``sd``; ``l -> 0`` accepts everything. The output is not distributed as
p for ``l < 1``. Note: METHODS-VARIANTS.md 6.1 writes the same rule with ``1 - l`` in place of ``l``; this
module follows METHODS-DIVERSED.md (``l = 1`` is lossless). ``expected_accept`` is
``sum_x min(q(x), p(x) / l)``, the acceptance probability averaged over x ~ q.

Greedy analogue [INFERRED in the spec]: accept x_i iff ``p_i(x_i) >= l * max p_i`` (p the T=1 softmax) and emit
``argmax p`` at the first failure (``argmax p_k`` if all pass).

Not covered: the ``beta < 1`` residuals and mentored decoding (METHODS-VARIANTS.md 6.2).
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

__all__ = ["lossy"]


def lossy(
    q: Tensor,
    p: Tensor,
    x: Tensor,
    *,
    u: Tensor | None = None,
    generator: torch.Generator | None = None,
    w: Tensor | None = None,
    greedy: bool = False,
    state: dict[str, Tensor] | None = None,
    lenience: float,
) -> VerifyOutput:
    """Lossy speculative sampling with lenience ``l``.

    Args:
        q (Tensor[B, k, V] or Tensor[B, k+1, V]): draft probabilities (``q[:, k]``, if present, is unused).
        p (Tensor[B, k+1, V]): target probabilities.
        x (Tensor[B, k] long): drafted tokens.
        u (Tensor[B, k+1] | None): uniforms; ``u[:, :k]`` accept tests, ``u[:, k]`` draws the emitted token.
        generator (torch.Generator | None): draws ``u`` when it is None.
        w (Tensor | None): unused (shared signature).
        greedy (bool): temperature-0 analogue (accept iff ``p(x) >= l * max p``).
        state (dict[str, Tensor] | None): passed through unchanged.
        lenience (float): ``l in (0, 1]``; 1 recovers ``sd``.

    Returns:
        VerifyOutput: accepted prefix length, emitted token and acceptance statistics.

    Raises:
        ValueError: if ``lenience`` is outside ``(0, 1]``.
    """
    if not 0.0 < lenience <= 1.0:
        raise ValueError(f"lenience must be in (0, 1], got {lenience}")
    b, k, _, _ = check_inputs(q, p, x)
    p, q = as_float(p), as_float(q)
    q_k, p_k = q[:, :k], p[:, :k]
    if greedy:
        p_max, p_star = p.amax(-1), p.argmax(-1)
        passed = gather_token_probs(p_k, x) >= lenience * p_max[:, :k]
        return finish_greedy(passed, p_star, state)
    u = draw_uniforms(b, k, u=u, generator=generator, device=p.device)
    accept_prob = accept_ratio(gather_token_probs(p_k, x) / lenience, gather_token_probs(q_k, x))
    return finish_stochastic(q_k, u, accept_prob, overlap(q_k, p_k / lenience), p_k, p[:, k], state)

"""ASD, Approximate Speculative Decoding with a bounded-regret ledger (github Kissmetothemoon/ASD), rule ``asd``.

METHODS-VARIANTS.md section 3. Greedy verification only. At draft position i (0-based, i < k) let
``p*_i = argmax p_i`` (first-max tie rule), the regret ``r_i = log p_i(p*_i) - log p_i(x_i) >= 0`` (+inf when
``p_i(x_i) = 0``; equal to the T=1 target-logit gap) and the suffix value ``v_i = k - i`` (``value="suffix"``, the
Qwen profile) or ``(k - i) / k`` (``value="normalized_suffix"``, the DeepSeek profile). Scanning i = 0, 1, ...:
an exact match ``x_i == p*_i`` is free; a mismatch is accepted iff

* (gate)   ``r_i / v_i <= gate``,
* (budget) the cumulative in-block regret of accepted mismatches, this one included, is ``<= budget - spent``
  where ``spent`` is the row's ledger before the block,
* (cap)    the number of accepted mismatches in the block, this one included, is ``<= cap``.

The first position j that fails stops the prefix: commit x_0..x_{j-1} and emit ``argmax p_j`` (``argmax p_k`` if
all k pass). The ledger is charged ``spent += sum of r_i over the accepted mismatches`` and returned in
``VerifyOutput.state["spent"]`` (per row; missing state means zeros).

Exact reduction: relaxation is switched off entirely when ``budget <= 0``, ``gate <= 0`` or ``cap <= 0``, which
gives strict greedy verification token for token (without the switch a zero-regret mismatch, a tie for the
target maximum, would still pass a zero budget). The DeepSeek rule's extra "pre-token cumulative regret < remaining
budget" check is not implemented.

``accept_prob``/``expected_accept`` are 0/1: 1 where the position passes the scan (for positions after the stop,
where the scan never ran, 1 iff ``x_i == argmax p_i``).

The budget scan is a loop over the k positions, vectorised over the batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from relaxspec.verify.base import VerifyOutput, as_float, check_inputs, gather_token_probs, prefix_accept

__all__ = ["VALUES", "asd", "asd_regret"]

VALUES = ("suffix", "normalized_suffix")


def asd_regret(p_k: Tensor, x: Tensor) -> Tensor:
    """Local regret ``log p(argmax p) - log p(x)`` of each drafted token.

    Args:
        p_k (Tensor[B, k, V]): target probabilities at the drafted positions.
        x (Tensor[B, k] long): drafted tokens.

    Returns:
        Tensor[B, k]: regret >= 0, exactly 0 where ``x`` is the argmax, +inf where ``p(x) = 0``.
    """
    p_x = gather_token_probs(p_k, x)
    p_max = p_k.amax(-1)
    safe_x = torch.where(p_x > 0, p_x, torch.ones_like(p_x))
    r = (torch.log(p_max.clamp(min=torch.finfo(p_max.dtype).tiny)) - torch.log(safe_x)).clamp(min=0.0)
    r = torch.where(p_x > 0, r, torch.full_like(r, float("inf")))
    return torch.where(x == p_k.argmax(-1), torch.zeros_like(r), r)


def asd(
    q: Tensor,
    p: Tensor,
    x: Tensor,
    *,
    u: Tensor | None = None,
    generator: torch.Generator | None = None,
    w: Tensor | None = None,
    greedy: bool = False,
    state: dict[str, Tensor] | None = None,
    budget: float,
    gate: float,
    cap: int,
    value: str = "suffix",
) -> VerifyOutput:
    """Bounded-regret relaxed greedy verification.

    Args:
        q (Tensor[B, k, V] or Tensor[B, k+1, V]): draft probabilities (unused beyond shape checks).
        p (Tensor[B, k+1, V]): target probabilities (T=1 softmaxes).
        x (Tensor[B, k] long): drafted tokens.
        u (Tensor | None): unused (deterministic rule).
        generator (torch.Generator | None): unused.
        w (Tensor | None): unused (shared signature).
        greedy (bool): must be True.
        state (dict[str, Tensor] | None): ``{"spent": Tensor[B]}`` regret already charged to each row's
            ledger; None or a missing key means zeros. Not modified in place.
        budget (float): per-row total regret budget B.
        gate (float): maximum regret per unit of suffix value g.
        cap (int): maximum accepted mismatches per block m.
        value (str): ``"suffix"`` (``v_i = k - i``) or ``"normalized_suffix"`` (``v_i = (k - i) / k``).

    Returns:
        VerifyOutput: accepted prefix length, emitted token, 0/1 statistics and the updated state
        (a new dict holding ``"spent"`` plus any other keys of ``state``).

    Raises:
        ValueError: if ``greedy`` is False or ``value`` is unknown.
    """
    if not greedy:
        raise ValueError("asd is a greedy-only rule (temperature 0); call it with greedy=True")
    if value not in VALUES:
        raise ValueError(f"value must be one of {VALUES}, got {value!r}")
    b, k, _, _ = check_inputs(q, p, x)
    p = as_float(p)
    p_star = p.argmax(-1)  # [B, k+1]
    match = x == p_star[:, :k]
    old = {} if state is None else dict(state)
    spent = old.get("spent")
    spent = torch.zeros(b, dtype=p.dtype, device=p.device) if spent is None else spent.to(p.device, p.dtype)

    passed = match.clone()
    charged = torch.zeros(b, dtype=p.dtype, device=p.device)
    if budget > 0 and gate > 0 and cap > 0 and k > 0:
        regret = asd_regret(p[:, :k], x)
        idx = torch.arange(k, 0, -1, dtype=p.dtype, device=p.device)
        v = idx / k if value == "normalized_suffix" else idx
        remaining = budget - spent
        alive = torch.ones(b, dtype=torch.bool, device=p.device)
        count = torch.zeros(b, dtype=torch.long, device=p.device)
        for i in range(k):
            r_i = regret[:, i]
            relaxed = (
                ~match[:, i]
                & (r_i / v[i] <= gate)
                & (charged + r_i <= remaining)
                & (count + 1 <= cap)
            )
            take = alive & relaxed
            charged = torch.where(take, charged + r_i, charged)
            count = count + take.to(torch.long)
            passed[:, i] = match[:, i] | take
            alive = alive & passed[:, i]
    n_accepted, mask = prefix_accept(passed)
    next_token = p_star.gather(-1, n_accepted.unsqueeze(-1)).squeeze(-1)
    prob = passed.to(torch.float32)
    old["spent"] = spent + charged
    return VerifyOutput(n_accepted, next_token, mask, prob, prob.clone(), old)

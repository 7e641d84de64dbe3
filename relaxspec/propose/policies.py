"""Draft-length policies: how many proposed tokens each row sends to verification in a round.

A policy is independent of the verification rule (any policy combines with any rule in relaxspec.verify)
and of the proposer (the autoregressive draft model or the parallel prompt-lookup proposer). It is
stateless itself; its per-row state is a dict created by ``init(batch)`` and threaded through the round:

    state = policy.init(B)
    budget = policy.begin_round(state)                 # [B] long, per-row cap this round (<= max_len)
    for j = 1, 2, ...:                                 # positions, left to right
        admit = policy.admit(state, step_j)            # BEFORE x_j is drawn: is x_j proposed at all?
        ... x_j is drawn (model) or read (lookup) ...
        go_on = policy.extend(state, step_j)           # AFTER x_j is drawn: may x_{j+1} be proposed?
    policy.end_round(state, lengths, n_accepted, token_probs)   # after verification
    state = policy.select(state, keep)                 # finished rows leave the batch

``admit`` may only look at what is known before x_j is sampled (the draft distribution q_j, its max-prob
c_j, its entropy; never q_j(x_j)). ``extend`` may look at the sampled x_j (e.g. q_j(x_j)), because it only
decides about x_{j+1}. A row stops at the first False of either hook and never restarts in that round.
This is the causality rule that keeps sampled verification lossless: whether position j is verified never
depends on the realisation of x_j (METHODS-VARIANTS.md §2, §7). The DSpark counter-example (App. A) is a rule
that admits x_j only when q_j(x_j) (or a c_{j+1} computed from x_j) is high: conditioning on x_j's own
value biases the emitted law (there, (0.7, 0.3) became (0.85, 0.15)). Such a rule cannot be written with
these hooks except by putting q_j(x_j) into ``admit``, which ``StepInfo`` does not carry.

Policies (config name -> class): constant -> ConstantPolicy, heuristic -> HeuristicPolicy,
confidence -> ConfidencePolicy, entropy -> EntropyPolicy, libraspec -> LibraSpecPolicy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "ConfidencePolicy",
    "ConstantPolicy",
    "EntropyPolicy",
    "HeuristicPolicy",
    "LengthPolicy",
    "LibraSpecPolicy",
    "StepInfo",
    "libraspec_length",
    "roc_threshold",
    "select_state",
]


class StepInfo:
    """What a policy may see about position j (1-based) of the current round, batched over rows.

    Attributes:
        j: position (1-based).
        conf: ``[B]`` proposer confidence c_j (draft model: max_v q_j(v); prompt lookup: its own estimate).
        entropy: ``[B]`` entropy H(q_j) in nats (0 for a deterministic proposer). Given directly, or computed
            from ``q`` (``[B, V]``) on first access only: a pass over the vocabulary that most policies never need.
        token_prob: ``[B]`` q_j(x_j) of the drawn token; set only for ``extend`` (None in ``admit``).
    """

    __slots__ = ("_entropy", "_q", "conf", "j", "token_prob")

    def __init__(self, j: int, conf: Tensor, entropy: Tensor | None = None, token_prob: Tensor | None = None, *,
                 q: Tensor | None = None):
        if entropy is None and q is None:
            raise ValueError("StepInfo needs the entropy or the distribution q it is computed from")
        self.j, self.conf, self.token_prob = j, conf, token_prob
        self._entropy, self._q = entropy, q

    @property
    def entropy(self) -> Tensor:
        if self._entropy is None:
            q = self._q.float()
            self._entropy = -(q * torch.log(q.clamp_min(1e-30))).sum(-1).cpu()
        return self._entropy


def select_state(state: dict[str, Any], keep: Sequence[int]) -> dict[str, Any]:
    """Keep rows ``keep`` of a per-row state (tensors indexed on dim 0, lists by position)."""
    out: dict[str, Any] = {}
    for name, val in state.items():
        if name == "_b":
            out[name] = len(keep)
        elif isinstance(val, Tensor):
            out[name] = val[torch.as_tensor(list(keep), dtype=torch.long, device=val.device)]
        elif isinstance(val, list):
            out[name] = [val[i] for i in keep]
        else:
            out[name] = val
    return out


class LengthPolicy:
    """Base class: the constant-length defaults of every hook. ``max_len`` bounds every round."""

    name = "base"

    def __init__(self, max_len: int, min_len: int = 1):
        if min_len < 1 or max_len < min_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
        self.max_len = int(max_len)
        self.min_len = int(min_len)

    def init(self, batch: int) -> dict[str, Any]:
        return _with_batch({}, batch)

    def begin_round(self, state: dict[str, Any]) -> Tensor:
        b = self._batch(state)
        return torch.full((b,), self.max_len, dtype=torch.long)

    def admit(self, state: dict[str, Any], step: StepInfo) -> Tensor:
        return torch.ones_like(step.conf, dtype=torch.bool)

    def extend(self, state: dict[str, Any], step: StepInfo) -> Tensor:
        return torch.ones_like(step.conf, dtype=torch.bool)

    def end_round(self, state: dict[str, Any], lengths: Tensor, n_accepted: Tensor, token_probs: Tensor) -> None:
        """``lengths`` [B] proposed, ``n_accepted`` [B], ``token_probs`` [B, K] q_j(x_j) (K = max length)."""

    def select(self, state: dict[str, Any], keep: Sequence[int]) -> dict[str, Any]:
        return select_state(state, keep)

    def _batch(self, state: dict[str, Any]) -> int:
        return int(state["_b"])

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "max_len": self.max_len, "min_len": self.min_len}


def _with_batch(state: dict[str, Any], b: int) -> dict[str, Any]:
    state["_b"] = b
    return state


class ConstantPolicy(LengthPolicy):
    """k tokens every round (the classic SD setting)."""

    name = "constant"

    def __init__(self, k: int):
        super().__init__(max_len=k, min_len=k)
        self.k = int(k)



class HeuristicPolicy(LengthPolicy):
    """HF ``heuristic`` schedule, per row: L += 2 after a fully accepted round, else L = max(1, L - 1).

    ``max_len`` caps L (HF has no cap; the buffers need one).
    """

    name = "heuristic"

    def __init__(self, initial: int, max_len: int, min_len: int = 1):
        super().__init__(max_len=max_len, min_len=min_len)
        self.initial = int(min(max(initial, min_len), max_len))

    def init(self, batch: int) -> dict[str, Any]:
        return {"L": torch.full((batch,), self.initial, dtype=torch.long)}

    def begin_round(self, state: dict[str, Any]) -> Tensor:
        return state["L"].clone()

    def end_round(self, state, lengths, n_accepted, token_probs) -> None:
        full = n_accepted.cpu() >= lengths.cpu()
        L = state["L"]
        state["L"] = torch.where(full, L + 2, L - 1).clamp(self.min_len, self.max_len)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "initial": self.initial}


def roc_threshold(scores: Sequence[float], labels: Sequence[int], fnr_weight: float = 3.0) -> float:
    """The threshold minimising ``FPR + fnr_weight * FNR`` over the ROC of (scores, labels).

    Positive class = accepted (label 1); predicted positive = score >= threshold. Candidate thresholds are
    +inf and the distinct scores, highest first; ties go to the highest threshold (like ``np.argmin`` over
    sklearn's ``roc_curve`` order). Needs both classes present.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        raise ValueError("roc_threshold needs both classes")
    cands = np.concatenate([[np.inf], np.unique(s)[::-1]])
    pred = s[None, :] >= cands[:, None]
    tpr = (pred & y[None, :]).sum(1) / pos
    fpr = (pred & ~y[None, :]).sum(1) / neg
    cost = fpr + fnr_weight * (1.0 - tpr)
    return float(cands[int(np.argmin(cost))])


class ConfidencePolicy(LengthPolicy):
    """HF ``assistant_confidence_threshold``: stop after drafting x_j when q_j(x_j) < threshold (x_j is kept).

    With ``adapt``, each row re-fits its threshold after every round to the ROC point minimising
    ``FPR + 3 FNR`` over its history of (q_j(x_j), accepted) pairs (positions up to the first rejection), once
    the history holds at least ``min_samples`` of each class (HF: ``candidate_generator.py``).
    """

    name = "confidence"

    def __init__(self, threshold: float, max_len: int, adapt: bool = True, min_samples: int = 5,
                 fnr_weight: float = 3.0, min_len: int = 1):
        super().__init__(max_len=max_len, min_len=min_len)
        self.threshold = float(threshold)
        self.adapt = bool(adapt)
        self.min_samples = int(min_samples)
        self.fnr_weight = float(fnr_weight)

    def init(self, batch: int) -> dict[str, Any]:
        return {
            "threshold": torch.full((batch,), self.threshold, dtype=torch.float64),
            "probs": [[] for _ in range(batch)],
            "matches": [[] for _ in range(batch)],
        }

    def begin_round(self, state):
        return torch.full((len(state["probs"]),), self.max_len, dtype=torch.long)

    def extend(self, state, step):
        return step.token_prob.double().cpu() >= state["threshold"]

    def end_round(self, state, lengths, n_accepted, token_probs) -> None:
        if not self.adapt:
            return
        tp = token_probs.double().cpu().tolist()
        for r, (L, n) in enumerate(zip(lengths.tolist(), n_accepted.tolist(), strict=True)):
            seen = min(n + 1, L)  # accepted positions and the first rejected one
            state["probs"][r].extend(tp[r][:seen])
            state["matches"][r].extend([1] * n + [0] * (seen - n))
            m = state["matches"][r]
            ones = sum(m)
            if ones >= self.min_samples and len(m) - ones >= self.min_samples:
                state["threshold"][r] = roc_threshold(state["probs"][r], m, self.fnr_weight)

    def describe(self):
        return {**super().describe(), "threshold": self.threshold, "adapt": self.adapt}


class EntropyPolicy(LengthPolicy):
    """SVIP: stop after drafting x_t when sqrt(gamma * H(q_t)) > h (x_t is kept; H in nats)."""

    name = "entropy"

    def __init__(self, h: float, max_len: int, gamma: float = 0.15, min_len: int = 1):
        super().__init__(max_len=max_len, min_len=min_len)
        self.h = float(h)
        self.gamma = float(gamma)

    def extend(self, state, step):
        return torch.sqrt(self.gamma * step.entropy.double().clamp(min=0)).cpu() <= self.h

    def describe(self):
        return {**super().describe(), "h": self.h, "gamma": self.gamma}


def libraspec_length(conf: Sequence[float], cost: Sequence[float], l_min: int, l_max: int) -> int:
    """LibraSpec's marginal rule on one row (reference implementation, also used by tests).

    ``conf[i]`` = c_{i+1}; ``cost[L]`` = C(L) for L = 0..l_max. Starting from L = l_min, extend L -> L+1 while
    a_{L+1} C(L) > E[tau(L)] (C(L+1) - C(L)), with a_k = prod_{i<=k} c_i and E[tau(L)] = 1 + sum_{k<=L} a_k.
    The test is exactly S(L+1) > S(L) for S = E[tau]/C, and S is unimodal when a is non-increasing and C is
    convex, so the first failure is the argmax of S over [l_min, l_max] (the smallest one on ties).
    """
    l_max = min(l_max, len(conf))
    a, e = 1.0, 1.0
    n = 0  # current length L
    while n < l_max:
        a_next = a * float(conf[n])
        if n >= l_min and not (a_next * cost[n] > e * (cost[n + 1] - cost[n])):
            break
        a, e, n = a_next, e + a_next, n + 1
    return n


class LibraSpecPolicy(LengthPolicy):
    """LibraSpec (recon, METHODS-VARIANTS.md §2): marginal-gain length from confidences and a cost model.

    ``costs[L]`` = C(L), the measured round cost with L proposed tokens (``relaxspec.propose.cost``), for
    L = 0..max_len. Applied left to right: position j is admitted iff j <= min_len or
    a_j C(j-1) > E[tau(j-1)] (C(j) - C(j-1)); a row stops at the first failure. c_j is known before x_j is
    drawn (max-prob of q_j for the draft model; the lookup proposer's own estimate), so this is causal.
    """

    name = "libraspec"

    def __init__(self, costs: Sequence[float], max_len: int, min_len: int = 1, cost_source: str = ""):
        super().__init__(max_len=max_len, min_len=min_len)
        if len(costs) < max_len + 1:
            raise ValueError(f"need C(0..{max_len}), got {len(costs)} costs")
        self.costs = torch.tensor([float(c) for c in costs[: max_len + 1]], dtype=torch.float64)
        self.cost_source = cost_source

    def init(self, batch):
        return {"a": torch.ones(batch, dtype=torch.float64), "e": torch.ones(batch, dtype=torch.float64)}

    def begin_round(self, state):
        state["a"] = torch.ones_like(state["a"])
        state["e"] = torch.ones_like(state["e"])
        return torch.full((state["a"].shape[0],), self.max_len, dtype=torch.long)

    def admit(self, state, step):
        j = step.j
        a_next = state["a"] * step.conf.double().cpu().clamp(0, 1)
        c_prev, c_next = self.costs[j - 1], self.costs[min(j, self.max_len)]
        ok = a_next * c_prev > state["e"] * (c_next - c_prev)
        if j <= self.min_len:
            ok = torch.ones_like(ok)
        # rows that stop keep their (a, e); admitted rows accumulate
        state["a"] = torch.where(ok, a_next, state["a"])
        state["e"] = torch.where(ok, state["e"] + a_next, state["e"])
        return ok

    def describe(self):
        return {**super().describe(), "costs": [round(float(c), 6) for c in self.costs], "cost_source": self.cost_source}

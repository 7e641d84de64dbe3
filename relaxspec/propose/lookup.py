"""Prompt-lookup (n-gram) proposer: a parallel, model-free drafter (Saxena 2023; HF ``prompt_lookup_num_tokens``).

For each row, find the most recent earlier occurrence of the last n tokens of prompt + generated text
(n from ``max_ngram`` down to ``min_ngram``) and propose the up to ``max_len`` tokens that followed it, all at
once, with no model call. The proposer is deterministic, so its q is one-hot on the proposed token: every
verification rule accepts it (standard SD then accepts x with probability p(x), which is lossless; the
ensemble rules mix a one-hot q). Without any match, the row proposes one token (its last token repeated)
with confidence ``c_nomatch``: every round verifies at least one proposed token.

Confidences (for LibraSpec) come from match statistics: c_i estimates P(position i accepted | positions
< i accepted) from this row's earlier rounds, shrunk towards a decaying prior ``c0 * decay^(i-1)`` with
``prior`` pseudo-observations. They depend only on earlier rounds, never on the proposal itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["PromptLookup", "find_continuation"]


def find_continuation(tokens: Sequence[int], max_ngram: int, min_ngram: int, max_len: int) -> tuple[list[int], int]:
    """The continuation of the most recent earlier match of the longest matching suffix n-gram.

    Returns ``(continuation, n)`` with ``n`` the matched n-gram size, or ``([], 0)`` without a match.
    """
    t = list(tokens)
    size = len(t)
    for n in range(min(max_ngram, size - 1), min_ngram - 1, -1):
        if n < 1:
            break
        tail = t[size - n :]
        # start i of an earlier occurrence: i + n <= size - 1 so at least one token follows it
        for i in range(size - n - 1, -1, -1):
            if t[i : i + n] == tail:
                return t[i + n : i + n + max_len], n
    return [], 0


class PromptLookup:
    """Batched prompt-lookup proposals with per-row acceptance statistics (the row state)."""

    name = "prompt_lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, c0: float = 0.8, decay: float = 0.9,
                 prior: float = 4.0, c_nomatch: float = 0.05):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram, self.min_ngram = int(max_ngram), int(min_ngram)
        self.c0, self.decay, self.prior, self.c_nomatch = float(c0), float(decay), float(prior), float(c_nomatch)

    def init(self, batch: int, max_len: int) -> dict[str, Any]:
        return {"reached": torch.zeros(batch, max_len, dtype=torch.float64),
                "accepted": torch.zeros(batch, max_len, dtype=torch.float64)}

    def confidences(self, state: dict[str, Any]) -> Tensor:
        """``[B, max_len]`` current c_i per row."""
        max_len = state["reached"].shape[1]
        prior = self.c0 * self.decay ** torch.arange(max_len, dtype=torch.float64)
        return (state["accepted"] + self.prior * prior) / (state["reached"] + self.prior)

    def propose(self, state: dict[str, Any], histories: Sequence[Sequence[int]], max_len: int
                ) -> tuple[list[list[int]], Tensor]:
        """Per row: proposed tokens (1..max_len of them) and ``[B, max_len]`` confidences."""
        conf = self.confidences(state)[:, :max_len].clone()
        out = []
        for r, h in enumerate(histories):
            cont, _ = find_continuation(h, self.max_ngram, self.min_ngram, max_len)
            if not cont:
                cont = [int(h[-1])]
                conf[r] = self.c_nomatch
            out.append(cont)
        return out, conf

    def end_round(self, state: dict[str, Any], lengths: Tensor, n_accepted: Tensor) -> None:
        """Update the statistics: positions <= min(n+1, L) were reached, positions <= n accepted."""
        max_len = state["reached"].shape[1]
        pos = torch.arange(1, max_len + 1, dtype=torch.long)[None, :]
        n = n_accepted.cpu().long()[:, None]
        L = lengths.cpu().long()[:, None]
        state["reached"] += (pos <= torch.minimum(n + 1, L)).double()
        state["accepted"] += (pos <= n).double()

    def describe(self) -> dict[str, Any]:
        return {"proposer": self.name, "max_ngram": self.max_ngram, "min_ngram": self.min_ngram, "c0": self.c0,
                "decay": self.decay, "prior": self.prior}

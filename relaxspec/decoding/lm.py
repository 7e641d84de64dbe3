"""A thin wrapper that uses a Hugging Face causal LM as a logits / hidden-state oracle with a KV cache.

Ragged batches (rows that advance by different amounts) use **cache slots with validity masks**:
every forward appends the same number of slots to every row, and a per-row boolean mask marks which
slots hold committed tokens. Rejected draft tokens stay in the cache as *holes* (mask 0): attention
ignores them and position ids count only valid slots, so each row computes exactly what it would
compute alone. After each round the slots that are invalid in *every* row at the end of the cache are
cropped, so at batch size 1 the cache always has exactly the committed length (no holes ever).
Holes cost memory and attention time only when rows disagree; finished rows are removed from the batch.

The model body and the LM head are called separately, so logits are computed only where needed
(one position for prefill and draft steps, k+1 for a verify pass) and the last-layer hidden state
(after the final norm, the input of the LM head) comes for free for the DIVERSED weight head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel


@dataclass
class CacheState:
    """KV cache plus the per-row validity of every cache slot (``valid[B, S]``)."""

    cache: DynamicCache
    valid: Tensor

    @property
    def lengths(self) -> Tensor:
        """Committed (valid) tokens per row, ``[B]``."""
        return self.valid.sum(dim=1)


class CausalLM:
    """Forward passes of an HF causal LM over a `CacheState`; counts calls."""

    def __init__(self, model: PreTrainedModel):
        self.model = model
        self.body = model.get_decoder()
        self.head = model.get_output_embeddings()
        self.device = next(model.parameters()).device
        self.calls = 0

    def new_state(self, batch_size: int) -> CacheState:
        return CacheState(
            cache=DynamicCache(config=self.model.config),
            valid=torch.zeros(batch_size, 0, dtype=torch.bool, device=self.device),
        )

    @torch.no_grad()
    def forward(self, state: CacheState, input_ids: Tensor, input_valid: Tensor | None = None, keep: int = 1):
        """Append ``input_ids[B, n]`` to the cache; return (logits[B, keep, V] fp32, hidden[B, keep, d]).

        Args:
            state: the rows' cache; updated in place.
            input_ids: tokens to feed; padding slots may hold any id.
            input_valid: ``[B, n]`` bool, False for padding slots (never attended to); None = all valid.
            keep: number of trailing positions whose logits and hidden states are returned (0 = none).
        """
        self.calls += 1
        input_ids = input_ids.to(self.device)
        if input_valid is None:
            input_valid = torch.ones_like(input_ids, dtype=torch.bool)
        input_valid = input_valid.to(self.device)
        mask = torch.cat([state.valid, input_valid], dim=1)
        position_ids = (state.lengths[:, None] + input_valid.long().cumsum(dim=1) - 1).clamp(min=0)
        attention_mask = None if bool(mask.all()) else mask.long()
        out = self.body(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=state.cache,
            use_cache=True,
        )
        state.valid = mask
        if keep == 0:
            return None, None
        hidden = out.last_hidden_state[:, -keep:]
        logits = self.head(hidden).float()
        return logits, hidden

    @torch.no_grad()
    def prefill_rows(self, state: CacheState, rows: list[list[int]]) -> None:
        """Prefill an empty ``state`` row by row, then left-pad the caches into one batch.

        Computes exactly what `forward` on the left-padded batch computes (padding slots are invalid and never
        attended to), without the padding's compute and with batch-1 kernels: on a compute-bound CPU a padded
        batch prefill costs B x max_len tokens instead of sum(len), and its per-token throughput is lower.
        Rows may be empty (all-padding rows).
        """
        if state.valid.shape[1] != 0:
            raise ValueError("prefill_rows needs an empty cache state")
        width = max(len(r) for r in rows)
        if width == 0:
            return
        singles: list[CacheState | None] = []
        for r in rows:
            if not r:
                singles.append(None)
                continue
            st = self.new_state(1)
            self.forward(st, torch.tensor([r], dtype=torch.long), None, keep=0)
            singles.append(st)
        ref = next(st for st in singles if st is not None)
        for li, ref_layer in enumerate(ref.cache.layers):
            padded: dict[str, Tensor] = {}
            for name in ("keys", "values"):
                shape = getattr(ref_layer, name).shape  # [1, heads, len, dim]
                empty = getattr(ref_layer, name).new_zeros(1, shape[1], width, shape[3])
                rows_t = [empty if st is None else getattr(st.cache.layers[li], name) for st in singles]
                padded[name] = torch.cat([torch.nn.functional.pad(t, (0, 0, width - t.shape[2], 0)) for t in rows_t])
            state.cache.update(padded["keys"], padded["values"], li)
        valid = torch.zeros(len(rows), width, dtype=torch.bool, device=self.device)
        for i, r in enumerate(rows):
            if r:
                valid[i, width - len(r) :] = True
        state.valid = valid

    @staticmethod
    def invalidate(state: CacheState, row_slots: Tensor) -> None:
        """Mark slots invalid: ``row_slots[B, S]`` bool (True = drop), aligned with ``state.valid``."""
        state.valid = state.valid & ~row_slots

    @staticmethod
    def trim(state: CacheState) -> None:
        """Crop trailing slots that are invalid in every row (exact rollback at batch size 1)."""
        any_valid = state.valid.any(dim=0)
        keep = int(any_valid.nonzero().max().item()) + 1 if bool(any_valid.any()) else 0
        drop = state.valid.shape[1] - keep
        if drop > 0:
            state.cache.crop(-drop)
            state.valid = state.valid[:, :keep]

    @staticmethod
    def compact(state: CacheState, min_waste: int = 16, max_ratio: float = 0.25) -> None:
        """Squeeze out the holes (right-aligning each row's valid slots) when they waste enough space.

        Runs when the cache has more than ``max(min_waste, max_ratio * S)`` slots beyond the longest row,
        or has any hole at batch size 1 (so a single remaining row is exact again). Keys keep their
        rotary encoding and position ids count valid slots only, so the result computes the same values.
        """
        b, s = state.valid.shape
        lengths = state.lengths
        longest = int(lengths.max()) if b else 0
        waste = s - longest
        if waste <= 0 or (b > 1 and waste <= max(min_waste, max_ratio * s)):
            return
        # index of each row's valid slots, right-aligned into `longest` columns (left padding)
        order = torch.argsort((~state.valid).to(torch.int8), dim=1, stable=True)[:, :longest]  # valid first
        shift = (longest - lengths)[:, None]
        col = torch.arange(longest, device=state.valid.device)[None, :]
        src = torch.gather(order, 1, (col - shift).clamp(min=0))
        new_valid = col >= shift
        for layer in state.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)
                idx = src[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3])
                setattr(layer, name, torch.gather(t, 2, idx.to(t.device)).contiguous())
        state.valid = new_valid

    @staticmethod
    def select(state: CacheState, rows: Tensor) -> None:
        """Keep only ``rows`` (1-D long index) of the batch."""
        state.cache.batch_select_indices(rows)
        state.valid = state.valid[rows]

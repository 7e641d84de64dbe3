"""A decoding method = a `method` config bound to a loaded pair: AR or speculative with one rule.

`build_method(method_cfg, pair, draft_length=k, draft_cfg=cfg.draft)` returns a `Method` whose `generate(...)`
runs a batch of prompts and returns per-row outputs plus the wall-clock split. The draft-length policy and
the proposer (draft model or prompt lookup) come from the ``draft`` config group (conf/draft, built by
relaxspec.propose.build_draft) and combine with any rule; without ``draft_cfg`` the method drafts a
constant ``draft_length`` tokens with the draft model (the behaviour before issue 7).
This is the single place that maps method
configs to rule hyperparameters (e.g. the config's ``w_draft`` to the rule's target weight ``1 - w_draft``),
so the evaluation harness, the benchmark and the lm-eval client all decode identically.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from relaxspec.decoding.generate import BatchTiming, RowOutput, StopChecker, generate_ar, generate_speculative
from relaxspec.decoding.lm import CausalLM
from relaxspec.decoding.sampling import SamplingParams
from relaxspec.models.pairs import Pair, hidden_size
from relaxspec.models.weight_head import WeightHead
from relaxspec.propose.config import DraftSpec, build_draft
from relaxspec.propose.policies import ConstantPolicy
from relaxspec.verify import get_rule


def rule_kwargs(method_cfg: Any) -> dict[str, Any]:
    """Hyperparameters of the verification rule named by ``method_cfg.rule``."""
    rule = method_cfg.rule
    if rule in (None, "sd"):
        return {}
    if rule == "lossy":
        return {"lenience": float(method_cfg.lenience)}
    if rule == "static_ensemble":
        return {"w_target": 1.0 - float(method_cfg.w_draft), "mix": method_cfg.mix}
    if rule == "diversed":
        return {"mix": method_cfg.mix}
    if rule == "cascade":
        return {"alpha": float(method_cfg.alpha), "deferral": method_cfg.deferral}
    if rule == "asd":
        return {
            "budget": float(method_cfg.budget),
            "gate": float(method_cfg.gate),
            "cap": int(method_cfg.cap),
            "value": method_cfg.value,
        }
    raise ValueError(f"unknown rule '{rule}'")


@dataclass
class Method:
    """A runnable decoding method."""

    name: str
    rule: str | None
    target: CausalLM
    draft: CausalLM | None = None
    k: int = 5
    kwargs: dict[str, Any] = field(default_factory=dict)
    head: WeightHead | None = None
    exact_bonus: bool = False
    draft_spec: DraftSpec | None = None  # None -> constant k with the draft model

    @property
    def max_draft_len(self) -> int:
        """The most tokens one round can propose (for context-length checks)."""
        return self.draft_spec.max_len if self.draft_spec is not None else self.k

    @property
    def speculative(self) -> bool:
        return self.rule is not None

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        params: SamplingParams,
        max_new_tokens: Sequence[int],
        stopper: StopChecker,
        generator: torch.Generator | None = None,
    ) -> tuple[list[RowOutput], BatchTiming]:
        timing = BatchTiming()
        if not self.speculative:
            outs = generate_ar(self.target, prompts, params=params, max_new_tokens=max_new_tokens,
                               stopper=stopper, generator=generator, timing=timing)
            return outs, timing
        spec = self.draft_spec or DraftSpec(ConstantPolicy(self.k))
        outs = generate_speculative(
            self.draft,
            self.target,
            prompts,
            params=params,
            max_new_tokens=max_new_tokens,
            stopper=stopper,
            rule=get_rule(self.rule),
            rule_kwargs=self.kwargs,
            policy=spec.policy,
            lookup=spec.lookup,
            head=self.head,
            exact_bonus=self.exact_bonus,
            generator=generator,
            timing=timing,
        )
        return outs, timing


def load_head(method_cfg: Any, pair: Pair) -> WeightHead:
    """The trained head of ``method_cfg.head``, or the untrained (0.5/0.5) head when it is null."""
    d_q, d_p = hidden_size(pair.draft), hidden_size(pair.target)
    if method_cfg.get("head"):
        head = WeightHead.load(method_cfg.head, d_draft=d_q, d_target=d_p)
        mix = head.meta.get("mix")
        if mix is not None and mix != method_cfg.mix:
            raise ValueError(f"head '{method_cfg.head}' was trained with mix={mix} but method.mix={method_cfg.mix}")
    else:
        head = WeightHead(d_q, d_p, meta={"mix": method_cfg.mix, "trained": False})
    device = next(pair.target.parameters()).device
    return head.to(device).eval()


def build_method(method_cfg: Any, pair: Pair, *, draft_length: int, lms: dict[str, CausalLM] | None = None,
                 draft_cfg: Any = None, batch_size: int = 1) -> Method:
    """Bind a method config to a pair. ``lms`` lets several methods share the wrapped models.

    ``draft_cfg`` (a conf/draft node) selects the length policy and proposer; None = constant ``draft_length``.
    ``batch_size`` picks the profiled cost curve LibraSpec uses.
    """
    lms = lms if lms is not None else {"target": CausalLM(pair.target), "draft": CausalLM(pair.draft)}
    rule = method_cfg.get("rule")
    if rule is None:
        return Method(name=method_cfg.name, rule=None, target=lms["target"])
    head = load_head(method_cfg, pair) if rule == "diversed" else None
    exact_bonus = bool(method_cfg.get("exact_bonus", False))
    spec = None
    if draft_cfg is not None:
        spec = build_draft(draft_cfg, pair=pair, exact_bonus=exact_bonus, batch=batch_size)
        if spec.lookup is not None and head is not None:
            raise ValueError(f"method {method_cfg.name}: the DIVERSED weight head needs the draft model's hidden "
                             "states; use draft.proposer=model")
    return Method(
        name=method_cfg.name,
        rule=rule,
        target=lms["target"],
        draft=lms["draft"],
        k=draft_length,
        kwargs=rule_kwargs(method_cfg),
        head=head,
        exact_bonus=exact_bonus,
        draft_spec=spec,
    )

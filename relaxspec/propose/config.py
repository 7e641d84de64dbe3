"""``draft`` config group (conf/draft/*.yaml) -> a length policy and a proposer.

Keys (all policies): ``policy`` (constant | heuristic | confidence | entropy | libraspec), ``proposer``
(model | prompt_lookup), ``lookup`` (the prompt-lookup knobs, used when proposer = prompt_lookup) and the
policy's own knobs: constant ``k``; heuristic ``initial, max_len, min_len``; confidence ``threshold, adapt,
min_samples, fnr_weight, max_len``; entropy ``h, gamma, max_len``; libraspec ``min_len, max_len, cost``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from relaxspec.propose.cost import load_cost_model
from relaxspec.propose.lookup import PromptLookup
from relaxspec.propose.policies import (
    ConfidencePolicy,
    ConstantPolicy,
    EntropyPolicy,
    HeuristicPolicy,
    LengthPolicy,
    LibraSpecPolicy,
)

__all__ = ["POLICIES", "PROPOSERS", "DraftSpec", "build_draft", "validate_draft"]

POLICIES = ("constant", "heuristic", "confidence", "entropy", "libraspec")
PROPOSERS = ("model", "prompt_lookup")
_KEYS = {
    "constant": {"k"},
    "heuristic": {"initial", "max_len", "min_len"},
    "confidence": {"threshold", "adapt", "min_samples", "fnr_weight", "max_len", "min_len"},
    "entropy": {"h", "gamma", "max_len", "min_len"},
    "libraspec": {"min_len", "max_len", "cost"},
}
_COMMON = {"policy", "proposer", "lookup"}


@dataclass
class DraftSpec:
    """A built draft configuration: the length policy and the parallel proposer (None = the draft model)."""

    policy: LengthPolicy
    lookup: PromptLookup | None = None

    @property
    def proposer(self) -> str:
        return "model" if self.lookup is None else "prompt_lookup"

    @property
    def max_len(self) -> int:
        return self.policy.max_len


def _get(node: Any, key: str, default: Any = None) -> Any:
    if hasattr(node, "get"):
        return node.get(key, default)
    return getattr(node, key, default)


def validate_draft(node: Any) -> None:
    """Raise ValueError (one line) for an unknown policy / proposer, unknown keys or out-of-range values."""
    policy = _get(node, "policy")
    if policy not in POLICIES:
        raise ValueError(f"draft.policy must be one of {POLICIES}, got {policy!r}")
    proposer = _get(node, "proposer", "model")
    if proposer not in PROPOSERS:
        raise ValueError(f"draft.proposer must be one of {PROPOSERS}, got {proposer!r}")
    extra = set(node.keys()) - _COMMON - _KEYS[policy]
    if extra:
        raise ValueError(f"draft ({policy}) has unknown keys {sorted(extra)}; allowed: {sorted(_COMMON | _KEYS[policy])}")
    for key in ("k", "max_len", "min_len", "initial"):
        v = _get(node, key)
        if v is not None and int(v) < 1:
            raise ValueError(f"draft.{key} must be >= 1, got {v}")
    if policy == "libraspec":
        on_missing = _get(_get(node, "cost", {}), "on_missing", "fallback")
        if on_missing not in ("fallback", "error"):
            raise ValueError(f"draft.cost.on_missing must be 'fallback' or 'error', got {on_missing!r}")


def build_draft(draft_cfg: Any, *, pair: Any = None, exact_bonus: bool = False, batch: int = 1,
                costs: list[float] | None = None) -> DraftSpec:
    """Build the policy and proposer of a ``draft`` config node.

    Args:
        draft_cfg: a conf/draft node (DictConfig or dict).
        pair: the loaded pair (LibraSpec looks up its cost profile by pair name, backends and machine).
        exact_bonus: whether the method drafts the extra bonus step (adds one draft step to C(L)).
        batch: batch size whose profiled curve LibraSpec uses (nearest measured one).
        costs: explicit C(0..max_len) for LibraSpec (tests); overrides the profile.
    """
    validate_draft(draft_cfg)
    g = lambda k, d=None: _get(draft_cfg, k, d)  # noqa: E731
    name = g("policy")
    proposer = g("proposer", "model")
    lookup = None
    if proposer == "prompt_lookup":
        lk = g("lookup") or {}
        lookup = PromptLookup(**{k: lk[k] for k in lk})
    policy: LengthPolicy
    if name == "constant":
        policy = ConstantPolicy(int(g("k")))
    elif name == "heuristic":
        policy = HeuristicPolicy(int(g("initial")), int(g("max_len")), int(g("min_len", 1)))
    elif name == "confidence":
        policy = ConfidencePolicy(float(g("threshold")), int(g("max_len")), adapt=bool(g("adapt", True)),
                                  min_samples=int(g("min_samples", 5)), fnr_weight=float(g("fnr_weight", 3.0)),
                                  min_len=int(g("min_len", 1)))
    elif name == "entropy":
        policy = EntropyPolicy(float(g("h")), int(g("max_len")), gamma=float(g("gamma", 0.15)),
                               min_len=int(g("min_len", 1)))
    else:
        max_len, min_len = int(g("max_len")), int(g("min_len", 1))
        source = "explicit"
        if costs is None:
            if pair is None:
                raise ValueError("libraspec needs the pair (for its cost profile) or explicit costs")
            model = load_cost_model(pair, g("cost") or {}, batch=batch)
            costs = model.costs(max_len, proposer, exact_bonus)
            source = model.source
        policy = LibraSpecPolicy(costs, max_len, min_len, cost_source=source)
    return DraftSpec(policy=policy, lookup=lookup)

"""Proposers and draft-length policies for speculative decoding (issue 7).

The draft length is a proposer-side policy, independent of the verification rule:

* :mod:`relaxspec.propose.policies` -- ``constant``, ``heuristic`` (HF), ``confidence`` (HF threshold with the
  ROC re-fit), ``entropy`` (SVIP) and ``libraspec`` (marginal gain vs measured cost), batched with per-row state;
* :mod:`relaxspec.propose.lookup` -- the prompt-lookup (n-gram) parallel proposer (one-hot q, no model call);
* :mod:`relaxspec.propose.cost` -- the round-cost model C(L) read from ``python -m relaxspec.profile``;
* :mod:`relaxspec.propose.config` -- ``build_draft(cfg.draft, pair=...)`` for the ``conf/draft`` group.

How ragged lengths run inside ``relaxspec.decoding.generate.generate_speculative`` is described there.
"""

from relaxspec.propose.config import POLICIES, PROPOSERS, DraftSpec, build_draft, validate_draft
from relaxspec.propose.cost import CostModel, load_cost_model, machine_fingerprint, profile_path
from relaxspec.propose.lookup import PromptLookup, find_continuation
from relaxspec.propose.policies import (
    ConfidencePolicy,
    ConstantPolicy,
    EntropyPolicy,
    HeuristicPolicy,
    LengthPolicy,
    LibraSpecPolicy,
    StepInfo,
    libraspec_length,
    roc_threshold,
)

__all__ = [
    "POLICIES",
    "PROPOSERS",
    "ConfidencePolicy",
    "ConstantPolicy",
    "CostModel",
    "DraftSpec",
    "EntropyPolicy",
    "HeuristicPolicy",
    "LengthPolicy",
    "LibraSpecPolicy",
    "PromptLookup",
    "StepInfo",
    "build_draft",
    "find_continuation",
    "libraspec_length",
    "load_cost_model",
    "machine_fingerprint",
    "profile_path",
    "roc_threshold",
    "validate_draft",
]

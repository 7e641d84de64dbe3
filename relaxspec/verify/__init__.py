"""Verification rules for relaxed speculative decoding: pure, batched tensor functions, one file per family.

Every rule shares the signature

    rule(q, p, x, *, u=None, generator=None, w=None, greedy=False, state=None, **hyperparameters) -> VerifyOutput

with ``q`` the draft probabilities ``[B, k, V]`` (or ``[B, k+1, V]`` to include the bonus position), ``p`` the
target probabilities ``[B, k+1, V]`` and ``x`` the drafted tokens ``[B, k]``; see :mod:`relaxspec.verify.base` for
the conventions (how ``u`` is consumed, zero guards). Rule hyperparameters are keyword-only and have no library
defaults (they live in the YAML configs). ``get_rule(name)`` looks a rule up by its config name.
"""

from __future__ import annotations

from collections.abc import Callable

from relaxspec.verify.asd import asd
from relaxspec.verify.base import VerifyOutput
from relaxspec.verify.cascade import cascade
from relaxspec.verify.ensemble import diversed, static_ensemble
from relaxspec.verify.lossy import lossy
from relaxspec.verify.sd import sd

__all__ = [
    "RULES",
    "VerifyOutput",
    "asd",
    "cascade",
    "diversed",
    "get_rule",
    "lossy",
    "sd",
    "static_ensemble",
]

RULES: dict[str, Callable[..., VerifyOutput]] = {
    "sd": sd,
    "lossy": lossy,
    "static_ensemble": static_ensemble,
    "diversed": diversed,
    "cascade": cascade,
    "asd": asd,
}


def get_rule(name: str) -> Callable[..., VerifyOutput]:
    """Return the verification rule registered under ``name``.

    Args:
        name (str): one of the keys of ``RULES``.

    Returns:
        Callable[..., VerifyOutput]: the rule function.

    Raises:
        ValueError: for an unknown name, listing the valid ones.
    """
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"unknown verify rule {name!r}; valid: {', '.join(sorted(RULES))}") from None

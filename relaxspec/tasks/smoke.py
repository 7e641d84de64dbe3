"""Smoke task: a handful of prompts given inline in the config, for plumbing checks (no quality metric).

Config: `prompts: [str, ...]`; each becomes one user message with id "smoke/<i>". `score` returns only
`{"chars": len(completion)}`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from relaxspec.tasks.base import Task, _single_answer

__all__ = ["SmokeTask"]


class SmokeTask(Task):
    """Inline prompts; scores only the completion length in characters."""

    name = "smoke"
    primary_metric = "chars"
    splits = ("test",)

    def _load(self, split: str, limit: int | None) -> list[dict[str, Any]]:
        prompts = list(self.cfg.get("prompts") or [])
        if not prompts:
            raise ValueError("smoke: the config needs a non-empty `prompts: [..]` list")
        return [{"id": f"smoke/{i}", "prompt": str(p)} for i, p in enumerate(prompts)]

    def user_turn(self, example: Mapping[str, Any], turn: int) -> str:
        return example["prompt"]

    def score(self, example: Mapping[str, Any], completions: Sequence[str]) -> dict[str, Any]:
        return {"chars": float(len(_single_answer(self, example, completions)))}

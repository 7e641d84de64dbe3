"""The `Task` interface shared by every benchmark, and the bootstrap aggregation of per-example metrics.

A task turns a dataset into examples (plain dicts with a stable string `id`), the chat messages (or raw prompt)
for each turn, decoding hints (`stop`, `temperature`) and a scorer. It never generates text: the decoding engine
renders `messages(...)` with the model pair's chat template, generates, and hands the completions back to
`score(...)`. Multi-turn tasks (MT-Bench) are driven by calling `messages(example, previous_answers)` once per
turn, `num_turns(example)` times.

Covered: subset selection (`limit`, seeded shuffle), per-example metrics, means with seeded percentile-bootstrap
95% confidence intervals. Not covered: pass@k for k > 1 (one greedy sample per problem is the convention here).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Message", "Task", "bootstrap_aggregate", "select_subset"]

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}


def select_subset(rows: Sequence[Any], limit: int | None, seed: int | None) -> list[Any]:
    """Pick a deterministic subset: the first `limit` rows, after a seeded shuffle when `seed` is set.

    The shuffle only happens when both `limit` and `seed` are set, so a full evaluation keeps file order.

    Args:
        rows: All rows, in file order.
        limit: Number of rows to keep, or None for all.
        seed: Seed for `random.Random(seed).shuffle`, or None for file order.

    Returns:
        The selected rows (a new list).
    """
    rows = list(rows)
    if limit is None:
        return rows
    if seed is not None:
        random.Random(int(seed)).shuffle(rows)
    return rows[: max(0, int(limit))]


def bootstrap_aggregate(
    per_example: Sequence[Mapping[str, Any]],
    keys: Sequence[str] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, float]:
    """Mean of every numeric metric with a percentile-bootstrap confidence interval.

    Non-numeric values (strings such as `pred`) and None are ignored; booleans count as 0/1. Each metric is
    averaged over the examples that report it.

    Args:
        per_example: One metrics dict per example (as returned by `Task.score`).
        keys: Metrics to aggregate; default: every numeric key seen.
        n_resamples: Bootstrap resamples.
        seed: Seed of the resampling generator (results are reproducible).
        alpha: 1 - confidence level (0.05 gives a 95% interval).

    Returns:
        `{key: mean, key_ci_low: ..., key_ci_high: ..., ..., "n": number of examples}`.
    """
    if keys is None:
        seen: dict[str, None] = {}
        for row in per_example:
            for k, v in row.items():
                if isinstance(v, (int, float, bool)) and not isinstance(v, str):
                    seen[k] = None
        keys = list(seen)
    out: dict[str, float] = {"n": len(per_example)}
    rng = np.random.default_rng(seed)
    for k in keys:
        vals = np.array(
            [float(r[k]) for r in per_example if isinstance(r.get(k), (int, float, bool))], dtype=np.float64
        )
        vals = vals[~np.isnan(vals)]
        if vals.size == 0:
            out[k], out[f"{k}_ci_low"], out[f"{k}_ci_high"] = math.nan, math.nan, math.nan
            continue
        idx = rng.integers(0, vals.size, size=(n_resamples, vals.size))
        means = vals[idx].mean(axis=1)
        out[k] = float(vals.mean())
        out[f"{k}_ci_low"] = float(np.quantile(means, alpha / 2))
        out[f"{k}_ci_high"] = float(np.quantile(means, 1 - alpha / 2))
    return out


class Task:
    """Base class of every benchmark (subclass and override `_load` and `score`; the rest has defaults).

    Attributes:
        name: Registry name ("gsm8k", ...).
        version: Bumped whenever the prompt or the scorer changes (from the config, default 1).
        primary_metric: The headline metric key in `aggregate`.
        chat: True when `messages` is the prompt; False for raw completion (`raw_prompt`).
        stop: Stop strings for generation (empty = stop at EOS only).
        cfg: The dataset config as a plain dict.
    """

    name: str = "task"
    primary_metric: str = "accuracy"
    default_split: str = "test"
    splits: tuple[str, ...] = ("test",)

    def __init__(self, cfg: Mapping[str, Any] | None = None) -> None:
        self.cfg: dict[str, Any] = dict(cfg or {})
        self.version = int(self.cfg.get("version", 1) or 1)
        self.split: str = self.cfg.get("split") or self.default_split
        self.limit: int | None = self.cfg.get("limit")
        self.seed: int | None = self.cfg.get("seed")
        self.path: str | None = self.cfg.get("path")

    # ---- data -----------------------------------------------------------------------------------------------
    def _load(self, split: str, limit: int | None) -> list[dict[str, Any]]:
        """Return all records of `split` in file order (each with `id`); may stop after `limit` rows."""
        raise NotImplementedError

    def examples(
        self, split: str | None = None, limit: int | None = None, seed: int | None = None
    ) -> list[dict[str, Any]]:
        """Records of one split, each a dict with a stable string `id`.

        Args:
            split: Split name; None = the config's `split`.
            limit: Keep only this many; None = the config's `limit` (None there = all).
            seed: Shuffle seed applied before `limit`; None = the config's `seed` (None there = file order).

        Returns:
            The selected records.
        """
        split = split or self.split
        if split not in self.splits:
            raise ValueError(f"{self.name}: unknown split {split!r}; valid: {', '.join(self.splits)}")
        limit = self.limit if limit is None else limit
        seed = self.seed if seed is None else seed
        # Without a shuffle only the first `limit` rows are needed, so loaders may stop reading early.
        rows = self._load(split, limit if (limit is not None and seed is None) else None)
        return select_subset(rows, limit, seed)

    # ---- prompting ------------------------------------------------------------------------------------------
    @property
    def chat(self) -> bool:
        """True when the engine should render `messages(...)` with the chat template."""
        return True

    @property
    def stop(self) -> list[str]:
        """Stop strings (none by default)."""
        return []

    def num_turns(self, example: Mapping[str, Any]) -> int:
        """Number of user turns (1 except MT-Bench)."""
        return 1

    def user_turn(self, example: Mapping[str, Any], turn: int) -> str:
        """Text of the user message at `turn` (0-based)."""
        raise NotImplementedError

    def messages(self, example: Mapping[str, Any], previous_answers: Sequence[str] = ()) -> list[Message]:
        """Chat messages for the next turn; the turn index is `len(previous_answers)`.

        Args:
            example: A record from `examples()`.
            previous_answers: The model's own answers to the earlier turns.

        Returns:
            `[{"role": "user", "content": ...}, {"role": "assistant", ...}, ..., {"role": "user", ...}]`.
        """
        turn = len(previous_answers)
        if turn >= self.num_turns(example):
            raise ValueError(f"{example.get('id')}: turn {turn} requested but it has {self.num_turns(example)}")
        msgs: list[Message] = []
        for i, answer in enumerate(previous_answers):
            msgs.append({"role": "user", "content": self.user_turn(example, i)})
            msgs.append({"role": "assistant", "content": answer})
        msgs.append({"role": "user", "content": self.user_turn(example, turn)})
        return msgs

    def raw_prompt(self, example: Mapping[str, Any]) -> str:
        """Prompt text for raw completion (only meaningful when `chat` is False)."""
        return self.user_turn(example, 0)

    def temperature(self, example: Mapping[str, Any]) -> float | None:
        """Per-example sampling temperature, or None to use the run's decode temperature."""
        return None

    # ---- scoring --------------------------------------------------------------------------------------------
    def score(self, example: Mapping[str, Any], completions: Sequence[str]) -> dict[str, Any]:
        """Per-example metrics (floats; a few string fields such as `pred` ride along for the samples log).

        Args:
            example: A record from `examples()`.
            completions: The model's answers, one per turn.

        Returns:
            Metrics dict.
        """
        raise NotImplementedError

    def score_many(
        self, examples: Sequence[Mapping[str, Any]], completions: Sequence[Sequence[str]]
    ) -> list[dict[str, Any]]:
        """`score` over many examples (HumanEval overrides it to run programs in parallel)."""
        return [self.score(ex, c) for ex, c in zip(examples, completions, strict=True)]

    def aggregate(self, per_example: Sequence[Mapping[str, Any]], n_resamples: int = 1000) -> dict[str, float]:
        """Means of the numeric metrics with seeded bootstrap 95% CIs (see `bootstrap_aggregate`)."""
        seed = self.seed if self.seed is not None else 0
        return bootstrap_aggregate(per_example, n_resamples=n_resamples, seed=int(seed))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, version={self.version}, split={self.split!r})"


def _single_answer(task: Task, example: Mapping[str, Any], completions: Sequence[str] | str) -> str:
    """The one completion of a single-turn task (accepts a bare string too)."""
    if isinstance(completions, str):
        return completions
    if len(completions) != 1:
        raise ValueError(f"{task.name} is single-turn; got {len(completions)} completions for {example.get('id')}")
    return completions[0]

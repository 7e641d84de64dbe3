"""MT-Bench (Zheng et al. 2023): 80 two-turn questions in 8 categories, judged by an LLM.

Data: FastChat `question.jsonl` (question_id 81-160, `category`, `turns` [2 str], optional `reference`),
`judge_prompts.jsonl` and `reference_answer_gpt-4.jsonl` (from an explicit `path`, `$RELAXSPEC_DATA/mt_bench/`,
or, for the questions only, the hub copy HuggingFaceH4/mt_bench_prompts). Ids: "mt_bench/<question_id>".

Generation: `num_turns` = 2; turn 2's messages contain turn 1's question, the model's own first answer, then the
second question. Per-category temperatures follow FastChat `gen_model_answer.py` (writing/roleplay 0.7;
extraction/math/coding/reasoning 0.0; stem/humanities 0.1). No special stop strings.

Scoring is kept apart from generation. `score` always reports answer lengths (`chars_turn1`, `chars_turn2`);
when the config has a judge (`judge.kind: hf|openai`) it also grades both turns with FastChat single-answer
grading (`judge_turn1`, `judge_turn2`, `judge_score` = mean of the parsable turns, `judge` = the judge identity,
`judge_raw_turn{1,2}`). Fidelity helpers (`rouge_l`, `target_nll`) are in `relaxspec.tasks.fidelity`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from relaxspec.tasks.base import Task
from relaxspec.tasks.data import load_rows
from relaxspec.tasks.judge import NEED_REF_CATEGORIES, Judge, build_judge, judge_turn

__all__ = ["CATEGORY_TEMPERATURE", "MTBenchTask"]

CATEGORY_TEMPERATURE = {
    "writing": 0.7,
    "roleplay": 0.7,
    "extraction": 0.0,
    "math": 0.0,
    "coding": 0.0,
    "reasoning": 0.0,
    "stem": 0.1,
    "humanities": 0.1,
}


def _from_hub_row(r: Mapping[str, Any]) -> dict[str, Any]:
    """Map a HuggingFaceH4/mt_bench_prompts row to FastChat's question layout."""
    if "turns" in r:
        return dict(r)
    out = {"question_id": int(r["prompt_id"]), "category": r["category"], "turns": list(r["prompt"])}
    if r.get("reference"):
        out["reference"] = list(r["reference"])
    return out


class MTBenchTask(Task):
    """MT-Bench: two turns, per-category temperatures, optional LLM judge."""

    name = "mt_bench"
    primary_metric = "judge_score"
    splits = ("test",)

    def __init__(self, cfg: Mapping[str, Any] | None = None, judge: Judge | None = None) -> None:
        super().__init__(cfg)
        self._judge = judge

    def _load(self, split: str, limit: int | None) -> list[dict[str, Any]]:
        rows = load_rows("mt_bench", "question.jsonl", path=self.path, limit=limit,
                         hub=("HuggingFaceH4/mt_bench_prompts", None, "train"))
        out = []
        for r in map(_from_hub_row, rows):
            rec = {"id": f"mt_bench/{r['question_id']}", "question_id": int(r["question_id"]),
                   "category": r["category"], "turns": list(r["turns"])}
            if r.get("reference"):
                rec["reference"] = list(r["reference"])
            out.append(rec)
        return out

    def num_turns(self, example: Mapping[str, Any]) -> int:
        return len(example["turns"])

    def user_turn(self, example: Mapping[str, Any], turn: int) -> str:
        return example["turns"][turn]

    def temperature(self, example: Mapping[str, Any]) -> float | None:
        return CATEGORY_TEMPERATURE.get(example["category"])

    # ---- judging --------------------------------------------------------------------------------------------
    @cached_property
    def judge_prompts(self) -> dict[str, dict[str, Any]]:
        """FastChat judge templates by name."""
        rows = load_rows("mt_bench", "judge_prompts.jsonl", path=self._dir_path())
        return {r["name"]: r for r in rows}

    @cached_property
    def reference_answers(self) -> dict[int, list[str]]:
        """GPT-4 reference answers (both turns) by question_id, for the reference-guided categories."""
        rows = load_rows("mt_bench", "reference_answer_gpt-4.jsonl", path=self._dir_path())
        return {int(r["question_id"]): list(r["choices"][0]["turns"]) for r in rows}

    def _dir_path(self) -> str | None:
        """The explicit path as a folder (a `path` naming question.jsonl itself points at its folder)."""
        if self.path and os.path.isfile(os.path.expanduser(str(self.path))):
            return os.path.dirname(os.path.expanduser(str(self.path)))
        return self.path

    @property
    def judge(self) -> Judge | None:
        """The configured judge, built on first use (None for `judge.kind: none`)."""
        if self._judge is None and (self.cfg.get("judge") or {}).get("kind", "none") not in (None, "none"):
            self._judge = build_judge(self.cfg.get("judge"))
        return self._judge

    def reference_for(self, example: Mapping[str, Any]) -> list[str] | None:
        """Reference answers for the judge (GPT-4 answers for math/reasoning/coding), else None."""
        if example["category"] not in NEED_REF_CATEGORIES:
            return None
        return self.reference_answers.get(int(example["question_id"])) or example.get("reference")

    def judge_example(self, example: Mapping[str, Any], completions: Sequence[str], judge: Judge) -> dict[str, Any]:
        """Grade every turn of one example with `judge`; returns the `judge_*` metrics."""
        out: dict[str, Any] = {"judge": judge.identity}
        scores = []
        for turn in range(1, len(completions) + 1):
            js = judge_turn(judge, self.judge_prompts, example, completions, turn, self.reference_for(example))
            out[f"judge_turn{turn}"] = js.score if js.score is not None else math.nan
            out[f"judge_raw_turn{turn}"] = js.raw
            if js.score is not None:
                scores.append(js.score)
        out["judge_score"] = sum(scores) / len(scores) if scores else math.nan
        return out

    def score(self, example: Mapping[str, Any], completions: Sequence[str]) -> dict[str, Any]:
        if len(completions) != self.num_turns(example):
            raise ValueError(f"{example['id']}: expected {self.num_turns(example)} completions, got {len(completions)}")
        out: dict[str, Any] = {f"chars_turn{i + 1}": float(len(c)) for i, c in enumerate(completions)}
        judge = self.judge
        if judge is not None:
            out.update(self.judge_example(example, completions, judge))
        return out

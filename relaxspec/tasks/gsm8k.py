"""GSM8K (Cobbe et al. 2021): grade-school math word problems with integer answers.

Data: openai/grade-school-math `test.jsonl` (1,319) and `train.jsonl` (7,473, exposed for the trainer), fields
`question` and `answer`; the answer is a worked solution (with calculator annotations such as `<<16-3-4=9>>`)
ending in `#### <final answer>`. Gold = the text after the last `#### `, commas removed.

Prompt (DeepSpec / DFlash convention): the question plus
"\\nPlease reason step by step, and put your final answer within \\boxed{}." as one user message.

Answer extraction, two rules reported side by side (as lm-eval's strict-match / flexible-extract):

* strict: the last `\\boxed{N}` or `#### N` in the completion (whichever comes last) whose content is a number.
* flexible: the strict answer when there is one, else "The answer is N", else the last number in the text.

Numbers are normalised (commas, `$`, `\\$`, `%`, units in `\\text{}`, a trailing `.` stripped; unicode minus) and
compared numerically (|pred - gold| <= 1e-6 * max(1, |gold|)), so "18.0" equals "18" and "1,234" equals "1234".
`accuracy` = `exact_match_flexible` (the rule the paper's reward uses). Not covered: fractions or expressions as
answers (GSM8K gold answers are integers).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from relaxspec.tasks.base import Task, _single_answer
from relaxspec.tasks.data import load_rows
from relaxspec.tasks.math500 import last_boxed_content

__all__ = ["BOXED_INSTRUCTION", "GSM8KTask", "extract_flexible", "extract_strict", "gold_answer", "to_number"]

BOXED_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."

_NUM = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+"
_NUM_RE = re.compile(_NUM)
_HASH_RE = re.compile(r"####\s*\$?\s*(" + _NUM + ")")
_THE_ANSWER_RE = re.compile(r"[Tt]he (?:final )?answer is[:\s]*\$?\s*(" + _NUM + ")")


def _clean(text: str) -> str:
    return text.replace("\u2212", "-").replace("\u2013", "-")


def to_number(text: str | None) -> float | None:
    """Parse a number after stripping `$`, `\\$`, commas, `%`, `\\text{...}`, `\\!`, spaces and a trailing `.`.

    Args:
        text: Candidate answer text (e.g. "$1,234.", "18.0", "\\$18", "-5", "18 \\text{ dollars}").

    Returns:
        The value, or None when `text` is not a single number.
    """
    if text is None:
        return None
    s = _clean(str(text))
    s = re.sub(r"\\(?:text|mbox|mathrm)\{[^{}]*\}", "", s)
    s = s.replace("\\!", "").replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = s.replace(",", "").replace(" ", "").strip().strip("{}").rstrip(".")
    if re.fullmatch(r"[-+]?(?:\d+\.?\d*|\.\d+)", s) is None:
        return None
    return float(s)


def gold_answer(answer: str) -> str:
    """Gold final answer: the text after the last `#### `, commas removed."""
    return answer.split("#### ")[-1].strip().replace(",", "")


def extract_strict(completion: str) -> str | None:
    """The last `\\boxed{N}` or `#### N` answer (whichever occurs later), normalised; None if absent."""
    text = _clean(completion)
    cands: list[tuple[int, str]] = []
    boxed = last_boxed_content(text, with_position=True)
    if boxed is not None:
        content, pos = boxed
        value = to_number(content)
        if value is None:  # e.g. "\boxed{18 \text{ apples}}" or "\boxed{x = 18}": the last number inside
            nums = _NUM_RE.findall(re.sub(r"\\[a-zA-Z]+", " ", content))
            value = to_number(nums[-1]) if len(nums) == 1 else None
        if value is not None:
            cands.append((pos, _fmt(value)))
    for m in _HASH_RE.finditer(text):
        value = to_number(m.group(1))
        if value is not None:
            cands.append((m.start(), _fmt(value)))
    return max(cands)[1] if cands else None


def extract_flexible(completion: str) -> str | None:
    """Strict answer, else "The answer is N", else the last number in the text; None if there is no number."""
    strict = extract_strict(completion)
    if strict is not None:
        return strict
    text = _clean(completion)
    m = list(_THE_ANSWER_RE.finditer(text))
    if m:
        return _fmt(to_number(m[-1].group(1)))
    nums = _NUM_RE.findall(text)
    return _fmt(to_number(nums[-1])) if nums else None


def _fmt(value: float | None) -> str | None:
    if value is None:
        return None
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(float(value))


def numbers_equal(pred: str | None, gold: str) -> bool:
    """Numeric equality of two answer strings (None never matches)."""
    p, g = to_number(pred), to_number(gold)
    if p is None or g is None:
        return False
    return abs(p - g) <= 1e-6 * max(1.0, abs(g))


class GSM8KTask(Task):
    """GSM8K with the boxed-answer prompt; splits `test` and `train`."""

    name = "gsm8k"
    primary_metric = "accuracy"
    splits = ("test", "train")

    def _load(self, split: str, limit: int | None) -> list[dict[str, Any]]:
        rows = load_rows("gsm8k", f"{split}.jsonl", path=self.path, limit=limit, hub=("openai/gsm8k", "main", split))
        return [
            {"id": f"gsm8k/{split}/{i}", "question": r["question"], "answer": r["answer"],
             "gold": gold_answer(r["answer"])}
            for i, r in enumerate(rows)
        ]

    def user_turn(self, example: Mapping[str, Any], turn: int) -> str:
        return example["question"] + BOXED_INSTRUCTION

    def score(self, example: Mapping[str, Any], completions: Sequence[str]) -> dict[str, Any]:
        completion = _single_answer(self, example, completions)
        strict, flexible = extract_strict(completion), extract_flexible(completion)
        gold = example.get("gold") or gold_answer(example["answer"])
        em_flex = float(numbers_equal(flexible, gold))
        return {
            "accuracy": em_flex,
            "exact_match_strict": float(numbers_equal(strict, gold)),
            "exact_match_flexible": em_flex,
            "pred": flexible if flexible is not None else "",
        }

"""MATH-500 (Lightman et al. 2023's 500-problem split of Hendrycks MATH).

Data: `math500/test.jsonl` (openai/prm800k `math_splits/test.jsonl`; hub: HuggingFaceH4/MATH-500), fields
`problem`, `solution`, `answer` (LaTeX), `subject`, `level`, `unique_id`. Prompt: the problem plus the GSM8K boxed
instruction. Extraction: the content of the *last* `\\boxed{...}` (balanced braces, so nested braces work; also
`\\boxed 5` and `\\fbox{...}`); no boxed answer scores 0. Equivalence: `math_verify` (`parse` both sides wrapped in
`$...$`, then `verify(gold, pred)`: symbolic/numeric), or, failing that, exact match after Hendrycks-style
`strip_string` normalisation (spaces, `\\left`/`\\right`, `\\!`, units, degrees, `\\dfrac`/`\\tfrac`, `a/b`,
0.5 -> \\frac{1}{2}, trailing "."). Score key `accuracy` (plus `pred`).

Not covered: answers outside a box (the instruction asks for one), multiple boxed parts joined into one answer.
math_verify's signal-based timeouts are used only in the main thread (they cannot be set from worker threads).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from relaxspec.tasks.base import Task, _single_answer
from relaxspec.tasks.data import load_rows

__all__ = ["MATH500Task", "is_equiv", "last_boxed_content", "strip_string"]

BOXED_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."


def last_boxed_content(text: str, with_position: bool = False) -> Any:
    """Content of the last `\\boxed{...}` / `\\fbox{...}` (balanced braces) or `\\boxed X`.

    Args:
        text: Model output.
        with_position: Also return the start offset of the box.

    Returns:
        The content (stripped), `(content, start)` with `with_position`, or None without a box / when unbalanced.
    """
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx < 0:
        return None
    start = idx + (len("\\boxed") if text.startswith("\\boxed", idx) else len("\\fbox"))
    rest = text[start:]
    if rest.startswith(" ") and not rest.lstrip().startswith("{"):  # "\boxed 5"
        content = rest.lstrip().split("$")[0].split()[0] if rest.strip() else ""
        content = content.rstrip(".")
        return (content, idx) if with_position else content
    i = start
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                content = text[i + 1 : j].strip()
                return (content, idx) if with_position else content
    return None


# ---- Hendrycks-style normalisation (from the MATH repository's `is_equiv`, extended) -------------------------
def _fix_fracs(s: str) -> str:
    subs = s.split("\\frac")
    out = subs[0]
    for sub in subs[1:]:
        out += "\\frac"
        if sub and sub[0] == "{":
            out += sub
        elif len(sub) >= 2:
            a, b = sub[0], sub[1]
            if b != "{":
                out += "{" + a + "}{" + b + "}" + sub[2:]
            else:
                out += "{" + a + "}" + sub[1:]
        else:
            out += sub
    return out


def _fix_a_slash_b(s: str) -> str:
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    return f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}" if m else s


def _fix_sqrt(s: str) -> str:
    return re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)


def _remove_right_units(s: str) -> str:
    if "\\text{ " in s:
        return s.split("\\text{ ")[0]
    return s


def strip_string(s: str) -> str:
    """Normalise a LaTeX answer for exact-match comparison (Hendrycks MATH `strip_string`, extended).

    Args:
        s: Answer string, e.g. "\\left( 3, \\dfrac{\\pi}{2} \\right)".

    Returns:
        The normalised string, e.g. "(3,\\frac{\\pi}{2})".
    """
    s = str(s).replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "").replace("$", "")
    s = _remove_right_units(s)
    s = re.sub(r"\\(?:text|mbox|mathrm)\{\s*([^{}]*?)\s*\}", r"\1", s)
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace("\\,", "").replace("\\;", "").replace("\\ ", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    s = s.strip()
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    parts = s.split("=")
    if len(parts) == 2 and len(parts[0].strip()) <= 2:
        s = parts[1]
    s = _fix_sqrt(s)
    s = s.replace(" ", "")
    s = _fix_fracs(s)
    s = s.rstrip(".")
    if s == "0.5":
        s = "\\frac{1}{2}"
    s = _fix_a_slash_b(s)
    if re.fullmatch(r"-?\d+\.0+", s):
        s = s.split(".")[0]
    return s


def _math_verify_equiv(gold: str, pred: str) -> bool | None:
    try:
        from math_verify import parse, verify
    except ImportError:
        return None
    main = threading.current_thread() is threading.main_thread()
    kw_p = {} if main else {"parsing_timeout": None}
    kw_v = {} if main else {"timeout_seconds": None}
    try:
        g = parse(f"${gold}$", **kw_p)
        p = parse(f"${pred}$", **kw_p)
        if not g or not p:
            return None
        return bool(verify(g, p, **kw_v))
    except Exception:  # math_verify raises assorted parser/sympy errors on odd input
        return None


def is_equiv(gold: str, pred: str | None) -> bool:
    """True when `pred` is the same answer as `gold` (math_verify, else normalised string match).

    Args:
        gold: Gold LaTeX answer.
        pred: Extracted prediction (None = no answer, never equivalent).

    Returns:
        Whether they are equivalent.
    """
    if pred is None or not str(pred).strip():
        return False
    if strip_string(gold) == strip_string(pred):
        return True
    return bool(_math_verify_equiv(gold, pred))


class MATH500Task(Task):
    """MATH-500 with last-boxed extraction and math_verify equivalence."""

    name = "math500"
    primary_metric = "accuracy"
    splits = ("test",)

    def _load(self, split: str, limit: int | None) -> list[dict[str, Any]]:
        rows = load_rows("math500", f"{split}.jsonl", path=self.path, limit=limit,
                         hub=("HuggingFaceH4/MATH-500", None, split))
        out = []
        for i, r in enumerate(rows):
            rec = {"id": f"math500/{split}/{i}", "problem": r["problem"], "answer": r["answer"]}
            for k in ("subject", "level", "unique_id", "solution"):
                if k in r:
                    rec[k] = r[k]
            out.append(rec)
        return out

    def user_turn(self, example: Mapping[str, Any], turn: int) -> str:
        return example["problem"] + BOXED_INSTRUCTION

    def score(self, example: Mapping[str, Any], completions: Sequence[str]) -> dict[str, Any]:
        pred = last_boxed_content(_single_answer(self, example, completions))
        return {"accuracy": float(is_equiv(example["answer"], pred)), "pred": pred if pred is not None else ""}

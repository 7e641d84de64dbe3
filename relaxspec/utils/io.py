"""Crash-safe file writes: whole files via temp file + rename, JSONL records via single O_APPEND writes.

A process killed at any moment leaves either the old or the new version of a whole file, and a JSONL
file whose lines are all complete (a torn last line from a kill mid-write is detected and ignored by
`read_jsonl`, and `append_jsonl` starts a fresh line after it).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same directory and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one JSON line with a single write() on an O_APPEND descriptor, then fsync."""
    path = Path(path)
    line = json.dumps(record, default=str, ensure_ascii=False) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:  # a previous kill may have left a torn line: start a new one
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    line = "\n" + line
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All complete records of a JSONL file (torn or empty lines are skipped)."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out

"""Helpers of the ecosystem tests: subprocesses run offline, on the tiny pair, from the repo root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="offline",
               TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def run_cmd(cmd: list[str], timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=ROOT, env=child_env(**env), capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}")
    return res


@pytest.fixture
def tmp_out(tmp_path: Path) -> Path:
    return tmp_path

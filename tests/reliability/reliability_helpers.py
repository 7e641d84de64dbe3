"""Helpers shared by the reliability tests (imported as a plain module: the test dirs are not packages)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(args: list[str], *, timeout: float = 300, script: str = "evaluate.py") -> subprocess.CompletedProcess:
    """Run ``python <script> <args>`` from the repository root (offline, no W&B)."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1")
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, script, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def stderr_lines(res: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in res.stderr.splitlines() if ln.strip()]

"""Shared helpers: compose evaluate configs in-process and run evaluate.py as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from relaxspec.config import CONF_DIR

ROOT = CONF_DIR.parent
PROMPTS = [f"prompt number {i}" for i in range(12)]


def compose_eval(out_dir: Path, overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="evaluate", overrides=[*overrides, f"output_dir={out_dir}"])
    GlobalHydra.instance().clear()
    return cfg


def evaluate_cmd(run_dir: Path, overrides: list[str]) -> list[str]:
    return [sys.executable, "evaluate.py", *overrides, f"hydra.run.dir={run_dir}"]


def run_evaluate(run_dir: Path, overrides: list[str], env: dict[str, str] | None = None, timeout: int = 300):
    res = subprocess.run(evaluate_cmd(run_dir, overrides), cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, **(env or {})})
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def prompts_override(prompts: list[str] = PROMPTS) -> str:
    return "dataset.prompts=[" + ",".join(f"'{p}'" for p in prompts) + "]"

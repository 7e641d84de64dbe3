"""Benchmark tasks and their registry: `build_task(cfg)` turns a `dataset` config node into a `Task`.

Names: smoke, gsm8k, math500, humaneval, mt_bench. Task modules are imported lazily, so importing this package
does not import math_verify, rouge_score or transformers.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from relaxspec.tasks.base import Task, bootstrap_aggregate
from relaxspec.tasks.data import DataNotFoundError

__all__ = ["TASKS", "DataNotFoundError", "Task", "bootstrap_aggregate", "build_task"]

TASKS: dict[str, str] = {
    "smoke": "relaxspec.tasks.smoke:SmokeTask",
    "gsm8k": "relaxspec.tasks.gsm8k:GSM8KTask",
    "math500": "relaxspec.tasks.math500:MATH500Task",
    "humaneval": "relaxspec.tasks.humaneval:HumanEvalTask",
    "mt_bench": "relaxspec.tasks.mt_bench:MTBenchTask",
}


def _to_dict(cfg: Any) -> dict[str, Any]:
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return dict(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    except ImportError:
        pass
    if isinstance(cfg, Mapping):
        return dict(cfg)
    raise TypeError(f"build_task expects a dict or DictConfig, got {type(cfg).__name__}")


def build_task(cfg: Any) -> Task:
    """Build the task named by `cfg["name"]`.

    Args:
        cfg: The `dataset` config node (omegaconf DictConfig or dict) with at least `name`.

    Returns:
        The task instance.

    Raises:
        ValueError: Missing or unknown name (the message lists the valid ones).
    """
    d = _to_dict(cfg)
    name = d.get("name")
    if name not in TASKS:
        raise ValueError(f"unknown dataset name {name!r}; valid: {', '.join(TASKS)}")
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)(d)

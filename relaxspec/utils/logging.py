"""Metric loggers behind one interface: a local JSONL log (always) and an optional W&B mirror.

`build_logger(cfg, out_dir)` returns a `MetricLogger`. Code never branches on whether W&B is on.
W&B runs offline without any login by default on these machines (``logger.mode: offline``;
``WANDB_MODE`` in the environment wins). Only rank 0 logs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from relaxspec.utils.io import append_jsonl


class MetricLogger:
    """Local JSONL log; subclasses mirror to other backends."""

    def __init__(self, out_dir: str | Path, enabled: bool = True):
        self.path = Path(out_dir) / "log.jsonl"
        self.enabled = enabled

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        if self.enabled:
            append_jsonl(self.path, {"time": time.time(), "step": step, **metrics})

    def summary(self, metrics: dict[str, Any]) -> None:
        self.log({"summary": metrics})

    def table(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Per-sample records; the JSONL logger leaves them to samples.jsonl."""

    def artifact(self, name: str, paths: list[Path]) -> None:
        """Result files; the JSONL logger leaves them where they are."""

    def finish(self) -> None:
        """Close the run."""


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


class WandbLogger(MetricLogger):
    """JSONL log plus a W&B run (offline by default)."""

    def __init__(self, cfg: DictConfig, out_dir: str | Path, run_config: dict[str, Any], enabled: bool = True):
        super().__init__(out_dir, enabled)
        self.run = None
        if not enabled:
            return
        import wandb

        mode = os.environ.get("WANDB_MODE", cfg.get("mode", "offline"))
        wdir = Path(cfg.get("dir") or out_dir)
        wdir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=cfg.get("project", "relaxspec"),
            entity=cfg.get("entity"),
            group=cfg.get("group"),
            tags=list(cfg.get("tags") or []),
            mode=mode,
            dir=str(wdir),
            config=run_config,
            reinit="finish_previous",
        )

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        super().log(metrics, step)
        if self.run is not None:
            self.run.log(_flatten(metrics), step=step)

    def summary(self, metrics: dict[str, Any]) -> None:
        super().summary(metrics)
        if self.run is not None:
            for k, v in _flatten(metrics).items():
                if isinstance(v, int | float | str | bool) or v is None:
                    self.run.summary[k] = v

    def table(self, name: str, rows: list[dict[str, Any]]) -> None:
        if self.run is None or not rows:
            return
        import wandb

        cols = sorted({k for r in rows for k, v in r.items() if isinstance(v, int | float | str | bool)})
        self.run.log({name: wandb.Table(columns=cols, data=[[r.get(c) for c in cols] for r in rows])})

    def artifact(self, name: str, paths: list[Path]) -> None:
        if self.run is None:
            return
        import wandb

        art = wandb.Artifact(name, type="results")
        for p in paths:
            if Path(p).is_file():
                art.add_file(str(p))
        self.run.log_artifact(art)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def build_logger(cfg: DictConfig, out_dir: str | Path, full_config: DictConfig, rank: int = 0) -> MetricLogger:
    enabled = rank == 0
    if cfg.name == "wandb":
        return WandbLogger(cfg, out_dir, OmegaConf.to_container(full_config, resolve=True), enabled)
    return MetricLogger(out_dir, enabled)

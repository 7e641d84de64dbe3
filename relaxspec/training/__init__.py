"""DIVERSED weight-head training: on-policy REINFORCE + acceptance regulariser on a DeepSpeed engine.

    python train.py +experiment=diversed_gsm8k_qwen25

`run(cfg)` is the entry point of train.py; `DiversedTrainer` the trainer (setup / collect / train /
save_checkpoint / cleanup); `validate_trainer(cfg.trainer)` the config check; the objective lives in
`relaxspec.training.objective` and the pair cache in `relaxspec.training.cache`.
"""

from __future__ import annotations

from typing import Any

from relaxspec.training.config import deepspeed_config, total_optimizer_steps, validate_trainer

__all__ = ["DiversedTrainer", "deepspeed_config", "run", "total_optimizer_steps", "validate_trainer"]


def __getattr__(name: str) -> Any:  # the trainer imports deepspeed-adjacent code lazily
    if name == "DiversedTrainer":
        from relaxspec.training.trainer import DiversedTrainer

        return DiversedTrainer
    raise AttributeError(name)


def run(cfg: Any) -> dict[str, Any]:
    """Train the head described by ``cfg`` (conf/train.yaml); return the run summary."""
    from relaxspec.training.trainer import run as _run

    return _run(cfg)

"""Helpers for the trainer tests: compose conf/train.yaml with overrides (no Hydra app, explicit output_dir)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

CONF = Path(__file__).resolve().parents[2] / "conf"


def compose_train(overrides: list[str]):
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="train", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()

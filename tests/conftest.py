"""Shared fixtures. Tests never touch the Hugging Face hub."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
if "RELAXSPEC_DATA" not in os.environ and (SHARED_DATA / "gsm8k").is_dir():
    os.environ["RELAXSPEC_DATA"] = str(SHARED_DATA)


@pytest.fixture(scope="session")
def tiny_pair():
    from relaxspec.models.pairs import load_pair

    return load_pair(OmegaConf.load(ROOT / "conf" / "pair" / "tiny.yaml"))


@pytest.fixture(scope="session")
def real_pair():
    from relaxspec.models.pairs import load_pair

    return load_pair(OmegaConf.load(ROOT / "conf" / "pair" / "qwen25_coder.yaml"))


@pytest.fixture(autouse=True)
def _restore_process_group_env():
    """In-process trainers set RANK/WORLD_SIZE/MASTER_* like a launcher would; keep that out of later tests
    (a subprocess inheriting them would believe it was started by a launcher)."""
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    saved = {k: os.environ.get(k) for k in keys}
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v

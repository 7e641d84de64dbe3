"""Fixtures for task tests: never touch the Hugging Face hub; locate the shared offline data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.fixture
def shared_data(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point $RELAXSPEC_DATA at the shared offline data (skip when this checkout has none)."""
    if not (SHARED_DATA / "gsm8k" / "test.jsonl").is_file():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    monkeypatch.setenv("RELAXSPEC_DATA", str(SHARED_DATA))
    return SHARED_DATA


@pytest.fixture
def no_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """No data source except the (offline) hub."""
    monkeypatch.delenv("RELAXSPEC_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

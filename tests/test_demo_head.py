"""`make demo` picks its DIVERSED head in a fixed order, ending with the head shipped in heads/."""

from __future__ import annotations

import json
import shutil

import pytest

from relaxspec import demo
from relaxspec.models.weight_head import HeadMismatchError, WeightHead

SHIPPED = demo.ROOT / "heads" / demo.HEAD_EXPERIMENT


def test_shipped_head_is_a_trained_head_for_the_embedded_pair():
    head = WeightHead.load(SHIPPED, d_draft=896, d_target=1536)  # Qwen2.5-Coder 0.5B / 1.5B hidden sizes
    assert head.meta["trained"] is True and head.meta["pair"] == "qwen25_coder" and head.meta["steps"] > 0
    summary = json.loads((SHIPPED / "train_summary.json").read_text())
    assert summary["finished"] and summary["global_step"] == head.meta["steps"]
    with pytest.raises(HeadMismatchError):
        WeightHead.load(SHIPPED, d_draft=64, d_target=64)  # the tiny pair cannot use it


def test_find_head_order(tmp_path, monkeypatch):
    root, cache = tmp_path / "repo", tmp_path / "cache"
    shutil.copytree(SHIPPED, root / "heads" / demo.HEAD_EXPERIMENT)
    monkeypatch.setattr(demo, "ROOT", root)
    monkeypatch.setenv("RELAXSPEC_CACHE", str(cache))
    monkeypatch.delenv("RELAXSPEC_HEAD", raising=False)
    path, src = demo.find_head()
    assert path == root / "heads" / demo.HEAD_EXPERIMENT and "shipped" in src
    run_head = root / "outputs" / f"train_{demo.HEAD_EXPERIMENT}" / "runs" / "r1" / "head"
    shutil.copytree(SHIPPED, run_head)
    assert demo.find_head()[0] == run_head  # a local training run wins over the shipped head
    cached = cache / "heads" / demo.HEAD_EXPERIMENT / "head"
    shutil.copytree(SHIPPED, cached)
    assert demo.find_head()[0] == cached
    monkeypatch.setenv("RELAXSPEC_HEAD", str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit, match="not a head directory"):
        demo.find_head()
    shutil.rmtree(root / "heads")
    shutil.rmtree(root / "outputs")
    shutil.rmtree(cache)
    monkeypatch.delenv("RELAXSPEC_HEAD")
    path, src = demo.find_head()
    assert path is None and "UNTRAINED" in src

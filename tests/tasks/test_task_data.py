"""Registry, data loading (env var, explicit path, clear error offline), subsets and aggregation."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from relaxspec.tasks import DataNotFoundError, build_task
from relaxspec.tasks.base import bootstrap_aggregate


def test_registry_names_and_unknown():
    for name in ("smoke", "gsm8k", "math500", "humaneval", "mt_bench"):
        assert build_task({"name": name, "prompts": ["hi"]}).name == name
    with pytest.raises(ValueError, match="valid: smoke, gsm8k, math500, humaneval, mt_bench"):
        build_task({"name": "nope"})
    task = build_task(OmegaConf.create({"name": "gsm8k", "limit": 3, "seed": None}))
    assert task.version == 1 and task.split == "test"


def test_smoke_task():
    task = build_task({"name": "smoke", "prompts": ["a", "bb"]})
    exs = task.examples()
    assert [e["id"] for e in exs] == ["smoke/0", "smoke/1"]
    assert task.messages(exs[1], []) == [{"role": "user", "content": "bb"}]
    assert task.score(exs[0], ["hello"]) == {"chars": 5.0}


def test_gsm8k_from_env(shared_data):
    task = build_task({"name": "gsm8k", "seed": None})
    test = task.examples()
    assert len(test) == 1319 and test[17]["id"] == "gsm8k/test/17"
    assert all("," not in e["gold"] for e in test)
    assert len(task.examples(split="train", limit=5)) == 5
    assert len(build_task({"name": "gsm8k", "split": "train"}).examples()) == 7473


def test_subsets_deterministic(shared_data):
    task = build_task({"name": "gsm8k", "limit": 10, "seed": 0})
    a, b = task.examples(), task.examples()
    assert [e["id"] for e in a] == [e["id"] for e in b]
    assert [e["id"] for e in a] != [f"gsm8k/test/{i}" for i in range(10)]  # shuffled
    first = build_task({"name": "gsm8k", "limit": 4, "seed": None}).examples()
    assert [e["id"] for e in first] == [f"gsm8k/test/{i}" for i in range(4)]
    other = task.examples(seed=1)
    assert [e["id"] for e in other] != [e["id"] for e in a]


def test_math500_from_env(shared_data):
    exs = build_task({"name": "math500", "seed": None}).examples()
    assert len(exs) == 500 and exs[0]["id"] == "math500/test/0" and "answer" in exs[0]


def test_explicit_path(tmp_path, no_data):
    f = tmp_path / "mini.jsonl"
    rows = [{"question": f"q{i}", "answer": f"x\n#### {i},000"} for i in range(3)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    exs = build_task({"name": "gsm8k", "path": str(f), "seed": None}).examples()
    assert [e["gold"] for e in exs] == ["0000", "1000", "2000"]
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text(f.read_text())
    assert len(build_task({"name": "gsm8k", "path": str(tmp_path)}).examples()) == 3
    with pytest.raises(DataNotFoundError, match="explicit path"):
        build_task({"name": "gsm8k", "path": str(tmp_path / "missing")}).examples()


def test_clear_error_offline(no_data):
    with pytest.raises(DataNotFoundError) as e:
        build_task({"name": "gsm8k"}).examples()
    msg = str(e.value)
    assert "RELAXSPEC_DATA (unset)" in msg and "openai/gsm8k" in msg and "skipped" in msg
    assert isinstance(e.value, FileNotFoundError)
    with pytest.raises(DataNotFoundError, match="HuggingFaceH4/MATH-500"):
        build_task({"name": "math500"}).examples()


def test_env_dir_without_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAXSPEC_DATA", str(tmp_path))
    with pytest.raises(DataNotFoundError, match="missing"):
        build_task({"name": "math500"}).examples()


def test_humaneval_from_package(no_data):
    task = build_task({"name": "humaneval", "seed": None})
    exs = task.examples()
    assert len(exs) == 164 and exs[0]["id"] == "HumanEval/0"
    assert len(task.examples(limit=3)) == 3


def test_bootstrap_aggregate():
    per = [{"accuracy": float(i % 2), "pred": "x"} for i in range(100)]
    agg = bootstrap_aggregate(per, seed=0)
    assert agg["n"] == 100 and agg["accuracy"] == 0.5
    assert 0.35 < agg["accuracy_ci_low"] < 0.5 < agg["accuracy_ci_high"] < 0.65
    assert "pred" not in agg
    assert bootstrap_aggregate(per, seed=0) == agg
    one = bootstrap_aggregate([{"accuracy": 1.0}])
    assert one["accuracy"] == one["accuracy_ci_low"] == one["accuracy_ci_high"] == 1.0
    task = build_task({"name": "gsm8k"})
    assert task.aggregate(per)["accuracy"] == 0.5

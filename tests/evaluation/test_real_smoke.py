"""Real pair, greedy: SD reproduces AR's text exactly and takes fewer target forwards (tau > 1)."""

from __future__ import annotations

import json

import pytest
from eval_helpers import run_evaluate

pytestmark = pytest.mark.real

COMMON = ["pair=qwen25_coder", "dataset=smoke", "dataset.limit=1", "decode.temperature=0",
          "decode.max_new_tokens=16", "warmup=0"]


def test_sd_equals_ar_and_tau_above_one(tmp_path):
    out = {}
    for method in ("sd", "ar"):
        run_evaluate(tmp_path / method, [*COMMON, f"method={method}"], timeout=900)
        rec = [json.loads(ln) for ln in (tmp_path / method / "samples.jsonl").read_text().splitlines()]
        metrics = json.loads((tmp_path / method / "metrics.json").read_text())
        out[method] = (rec[0]["completion"], metrics["methods"][method])
    assert out["sd"][0] == out["ar"][0]
    assert out["sd"][1]["new_tokens"] == out["ar"][1]["new_tokens"]
    assert out["sd"][1]["mean_accepted_length"] > 1.0
    assert out["ar"][1]["mean_accepted_length"] == 1.0

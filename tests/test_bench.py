"""The benchmark runs end to end on the tiny pair (speed figures are not asserted)."""

from __future__ import annotations

import json

from relaxspec.bench import main


def test_bench_runs_on_tiny_pair(tmp_path):
    assert main(["--pair", "tiny", "--prompts", "2", "--max-new-tokens", "8", "--batch-sizes", "1", "2",
                 "--reps", "1", "--cost-reps", "1", "--k", "3", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "bench.json").read_text())
    assert {"HF generate AR", "HF assisted", "relaxspec AR b1", "relaxspec SD greedy b2", "DIVERSED T=1"} <= set(res["rows"])
    assert res["rows"]["relaxspec SD greedy b1"]["identical_to_ar"] is True
    assert res["rows"]["HF generate AR"]["identical_to_ar"] is True
    assert res["rows"]["HF assisted"]["identical_to_ar"] is True
    assert len(res["costs"]["target_ms"]) == 4
    assert (tmp_path / "bench.md").is_file() and (tmp_path / "cost_curves.png").is_file()

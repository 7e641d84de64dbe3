"""The benchmark runs end to end on the tiny pair (speed figures are not asserted)."""

from __future__ import annotations

import json

import pytest

from relaxspec.bench import main


def test_bench_runs_on_tiny_pair(tmp_path):
    assert main(["--pair", "tiny", "--prompts", "2", "--max-new-tokens", "8", "--batch-sizes", "1", "2",
                 "--reps", "1", "--cost-reps", "1", "--k", "3", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "bench.json").read_text())
    assert {"HF generate AR", "HF assisted", "relaxspec AR b1", "relaxspec SD greedy b2", "DIVERSED T=1"} <= set(res["rows"])
    assert res["rows"]["relaxspec SD greedy b1"]["identical_to_ar"] is True
    assert res["rows"]["HF generate AR"]["identical_to_ar"] is True
    assert res["rows"]["HF assisted"]["identical_to_ar"] is True
    assert res["rows"]["HF assisted (stock)"]["identical_to_ar"] is True
    assert res["summary"]["sd_greedy_vs_hf_assisted_stock"] > 0
    assert len(res["costs"]["target_ms"]) == 4
    sc = res["batch_scaling"]
    assert sc["ar_scaling"]["1"] == 1.0 and sc["sd_round_scaling"]["2"] > 0 and sc["target_k1_ms"]["2"] > 0
    assert (tmp_path / "bench.md").is_file() and (tmp_path / "cost_curves.png").is_file()


def test_round_overhead_profile_on_tiny_pair(tmp_path):
    from relaxspec.decoding import generate as gen_mod
    from relaxspec.decoding.lm import CausalLM
    from relaxspec.overhead import COMPONENTS
    from relaxspec.overhead import main as overhead_main

    before = (gen_mod.probs, gen_mod._verify_ragged, CausalLM.forward, CausalLM.__dict__["trim"])
    assert overhead_main(["--pair", "tiny", "--prompts", "2", "--max-new-tokens", "8", "--batch-sizes", "1", "2",
                          "--temperatures", "0", "1", "--k", "3", "--out", str(tmp_path)]) == 0
    assert (gen_mod.probs, gen_mod._verify_ragged, CausalLM.forward, CausalLM.__dict__["trim"]) == before  # restored
    res = json.loads((tmp_path / "overhead.json").read_text())
    assert len(res["runs"]) == 4 and (tmp_path / "overhead.md").is_file()
    for r in res["runs"]:
        parts = r["components_s"]
        assert set(parts) == {*COMPONENTS, "other"} and min(parts.values()) >= 0
        assert parts["forward_draft"] > 0 and parts["forward_target"] > 0 and parts["probs"] > 0
        assert sum(parts.values()) <= r["round_s"] * 1.001 + 1e-6  # a split of the round time
        assert r["round_s"] + r["prefill_s"] == pytest.approx(r["seconds"])
        assert 0 <= r["non_forward_share"] < 1 and r["tokens"] >= 8

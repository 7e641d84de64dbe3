"""The profiler runs end to end on the tiny pair, caches JSON + PNG, and LibraSpec then reads it."""

from __future__ import annotations

import json


def test_profile_end_to_end(tmp_path, monkeypatch, tiny_pair, capsys):
    monkeypatch.setenv("RELAXSPEC_CACHE", str(tmp_path))
    from relaxspec.profile import main
    from relaxspec.propose import build_draft, profile_path

    assert main(["pair=tiny", "--k-max", "3", "--reps", "2", "--prefill", "16", "--batch-sizes", "1", "2"]) == 0
    path = profile_path(tiny_pair)
    assert path.parent == tmp_path / "profiles" and path.is_file()
    assert path.with_suffix(".png").stat().st_size > 1000
    data = json.loads(path.read_text())
    assert data["pair"] == "tiny" and set(data["batches"]) == {"1", "2"}
    for curves in data["batches"].values():
        assert len(curves["draft_ms"]) == 3 and len(curves["target_ms"]) == 4
        assert all(t > 0 for t in curves["draft_ms"] + curves["target_ms"])
    assert str(path) in capsys.readouterr().out
    cfg = {"policy": "libraspec", "proposer": "model", "min_len": 1, "max_len": 6,
           "cost": {"profile": "auto", "on_missing": "error"}}
    pol = build_draft(cfg, pair=tiny_pair).policy
    assert pol.cost_source == str(path) and len(pol.costs) == 7

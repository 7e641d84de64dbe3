"""torchrun data-parallel evaluation: 2 ranks on CPU (gloo) give the 1-process outputs; merge and resume."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import BIN, run_cmd

from relaxspec import distributed as dist


def test_shard_covers_every_example_once():
    items = list(range(11))
    for world in (1, 2, 3, 4):
        shards = [dist.shard(items, r, world) for r in range(world)]
        assert sorted(x for s in shards for x in s) == items
        assert all(x % world == r for r, s in enumerate(shards) for x in s)
    with pytest.raises(ValueError):
        dist.shard(items, 2, 2)
    assert dist.world_size() == 1 and dist.rank() == 0 and not dist.init_process_group()


def _by_key(path):
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["id"], r["method"]): r for r in recs}, recs


def test_torchrun_two_ranks_match_one_process(tmp_path):
    args = ["evaluate.py", "pair=tiny", "methods=[ar,sd]", "dataset=smoke", "decode.temperature=0",
            "decode.max_new_tokens=8", "warmup=0"]
    one, two = tmp_path / "n1", tmp_path / "n2"
    run_cmd([sys.executable, *args, f"hydra.run.dir={one}"])
    res = run_cmd([str(BIN / "torchrun"), "--nproc_per_node", "2", "--master_port", "29547", *args,
                   f"hydra.run.dir={two}"])
    assert "merged 6 records from 2 rank file(s)" in res.stderr + res.stdout
    a, _ = _by_key(one / "samples.jsonl")
    b, recs = _by_key(two / "samples.jsonl")
    assert len(recs) == 6 and set(a) == set(b)  # 3 examples x 2 methods, none twice, none missed
    for key in a:
        assert [t["tokens"] for t in a[key]["turns"]] == [t["tokens"] for t in b[key]["turns"]], key
        assert a[key]["completion"] == b[key]["completion"]
    assert not list(two.glob("samples.rank*.jsonl"))
    m1, m2 = (json.loads((d / "metrics.json").read_text()) for d in (one, two))
    assert m2["complete"] and m2["task"]["n_examples"] == 3 and m2["provenance"]["timing"]["world_size"] == 2
    for name in ("ar", "sd"):
        for k in ("new_tokens", "target_calls", "accepted", "drafted"):
            assert m1["methods"][name][k] == m2["methods"][name][k], (name, k)
    # resume: a leftover rank file of an interrupted run is folded in; finished pairs are not rerun
    _, recs = _by_key(two / "samples.jsonl")
    (two / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[:4]))
    (two / "samples.rank1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[4:]))
    res = run_cmd([sys.executable, *args, f"hydra.run.dir={two}"])
    assert "0 pairs to run (6 already done)" in res.stderr + res.stdout
    after, recs2 = _by_key(two / "samples.jsonl")
    assert len(recs2) == 6 and set(after) == set(a) and not list(two.glob("samples.rank*.jsonl"))

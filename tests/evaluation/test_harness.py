"""The harness on the tiny pair: several methods per run, resume after SIGKILL, W&B offline summary."""

from __future__ import annotations

import glob
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from eval_helpers import PROMPTS, ROOT, compose_eval, evaluate_cmd, prompts_override, run_evaluate

from relaxspec.evaluation import run
from relaxspec.utils.io import read_jsonl

TINY = ["pair=tiny", "dataset=smoke", "decode=greedy", "warmup=0"]


def test_methods_list_one_line_per_example_and_method(tmp_path):
    cfg = compose_eval(tmp_path, [*TINY, "methods=[ar,sd,static_ensemble,diversed]", "decode.max_new_tokens=6",
                                  "++static_w_drafts=[0,1]"])
    metrics = run(cfg)
    recs = read_jsonl(tmp_path / "samples.jsonl")
    names = ["ar", "sd", "static_ensemble@0", "static_ensemble@1", "diversed"]
    assert Counter((r["id"], r["method"]) for r in recs) == {(f"smoke/{i}", m): 1 for i in range(3) for m in names}
    assert list(metrics["methods"]) == names and metrics["complete"]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["methods"]["static_ensemble@1"]["method_config"]["w_draft"] == 1.0
    assert m["methods"]["static_ensemble@1"]["acceptance_rate"] == 1.0  # pure draft accepts everything
    assert m["methods"]["sd"]["speedup_vs_ar"] > 0 and m["methods"]["ar"]["mean_accepted_length"] == 1.0
    prov = m["provenance"]
    assert {"git", "libraries", "machine", "seeds", "pair", "dataset", "decode"} <= set(prov)
    assert "sha" in prov["git"] and "dirty" in prov["git"] and prov["libraries"]["torch"]
    assert m["methods"]["diversed"]["head"]["trained"] is False
    # greedy: every lossless method reproduces AR token for token
    by = {(r["id"], r["method"]): r["turns"][0]["tokens"] for r in recs}
    for i in range(3):
        assert by[(f"smoke/{i}", "sd")] == by[(f"smoke/{i}", "ar")] == by[(f"smoke/{i}", "static_ensemble@0")]
    # rerunning into the same directory runs nothing and keeps every line
    before = (tmp_path / "samples.jsonl").read_text()
    run(cfg)
    assert (tmp_path / "samples.jsonl").read_text() == before


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_resume_after_sigkill_equals_uninterrupted_run(tmp_path, seed):
    """SIGKILL at a seeded random point (after 2..10 of 16 records, plus a random delay), then resume."""
    rng = random.Random(seed)
    kill_at, delay = rng.randint(2, 10), rng.uniform(0.0, 0.1)
    overrides = [*TINY, prompts_override(PROMPTS[:8]), "methods=[ar,sd]", "decode.max_new_tokens=10"]
    killed = tmp_path / "killed"
    proc = subprocess.Popen(evaluate_cmd(killed, overrides), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    samples = killed / "samples.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if samples.is_file() and len(samples.read_bytes().splitlines()) >= kill_at:
            break
        time.sleep(0.02)
    time.sleep(delay)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    n_killed = len(read_jsonl(samples))
    assert kill_at <= n_killed < 16
    for line in samples.read_text().splitlines():  # only complete lines
        json.loads(line)
    metrics = killed / "metrics.json"
    assert not metrics.exists() or json.loads(metrics.read_text())["methods"]

    run_evaluate(killed, overrides)  # resume
    ref = tmp_path / "ref"  # the uninterrupted run, in-process (same code path as evaluate.py)
    run(compose_eval(ref, overrides))
    got, want = read_jsonl(samples), read_jsonl(ref / "samples.jsonl")
    keys = Counter((r["id"], r["method"]) for r in got)
    assert len(keys) == 16 and set(keys.values()) == {1}
    assert {(r["id"], r["method"]): r["completion"] for r in got} == \
        {(r["id"], r["method"]): r["completion"] for r in want}
    m = json.loads(metrics.read_text())
    assert m["complete"] and all(v["n_samples"] == 8 for v in m["methods"].values())


def test_wandb_offline_run_has_summary_table_and_artifact(tmp_path):
    wdir = tmp_path / "wandb_root"
    run_evaluate(tmp_path / "run", [*TINY, "methods=[ar,sd]", "dataset.limit=2", "decode.max_new_tokens=6",
                                    "logger=wandb", f"logger.dir={wdir}"],
                 env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    runs = glob.glob(str(wdir / "wandb" / "offline-run-*"))
    assert len(runs) == 1
    records = read_wandb_records(next(Path(runs[0]).glob("run-*.wandb")))
    summary: dict = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update({u.key or "/".join(u.nested_key): json.loads(u.value_json) for u in r.summary.update})
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert summary["smoke/sd/acceptance_rate"] == metrics["methods"]["sd"]["acceptance_rate"]
    assert summary["smoke/sd/speedup_vs_ar"] == metrics["methods"]["sd"]["speedup_vs_ar"]
    assert "smoke/ar/tokens_per_second" in summary and "smoke/sd/quality/chars" in summary
    assert summary["samples/_type"] == "table-file" and summary["samples/nrows"] == 4
    config_keys = {u.key for r in records if r.WhichOneof("record_type") == "run" for u in r.run.config.update}
    assert {"pair", "method", "decode", "dataset"} <= config_keys
    artifacts = {r.artifact.name: sorted(m.path for m in r.artifact.manifest.contents)
                 for r in records if r.WhichOneof("record_type") == "artifact"}
    assert artifacts["results"] == ["config.yaml", "metrics.json", "samples.jsonl"]
    assert (tmp_path / "run" / "log.jsonl").is_file()  # the local log is always written


def read_wandb_records(path: Path) -> list:
    """Records of an offline ``run-*.wandb`` file (wandb >= 0.19 writes no wandb-summary.json offline).

    The file is a 7-byte header (":W&B", magic, version) followed by LevelDB-log-style 32 KiB blocks of
    records (crc32, length, type: 1 full, 2 first, 3 middle, 4 last), each a serialized ``Record`` proto.
    """
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos = path.read_bytes(), 32768, 7
    assert data[:4] == b":W&B"
    out, buf = [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
    return out


def test_resume_refuses_a_different_config(tmp_path):
    import pytest

    from relaxspec.config import ConfigError

    cfg = compose_eval(tmp_path, [*TINY, "method=ar", "dataset.limit=1", "decode.max_new_tokens=4"])
    run(cfg)
    with pytest.raises(ConfigError, match="different 'decode'"):
        run(compose_eval(tmp_path, [*TINY, "method=ar", "dataset.limit=1", "decode.max_new_tokens=5"]))
    # adding a method to the same run dir is fine
    run(compose_eval(tmp_path, [*TINY, "methods=[ar,sd]", "dataset.limit=1", "decode.max_new_tokens=4"]))
    assert len(read_jsonl(tmp_path / "samples.jsonl")) == 2


def _mt_bench_dir(root: Path) -> Path:
    """Two FastChat-layout questions: one greedy (math, T=0), one sampled (writing, T=0.7)."""
    root.mkdir(parents=True)
    rows = [{"question_id": 1, "category": "math", "turns": ["What is 2 + 3?", "And times 4?"]},
            {"question_id": 2, "category": "writing", "turns": ["Write a haiku.", "Make it sadder."]}]
    (root / "question.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_mt_bench_fidelity_scores_every_record_against_the_target(tmp_path):
    from relaxspec.models.pairs import load_pair
    from relaxspec.tasks.fidelity import rouge_l, target_nll

    data = _mt_bench_dir(tmp_path / "mtb")
    cfg = compose_eval(tmp_path / "run", ["pair=tiny", "dataset=mt_bench", f"dataset.path={data}", "warmup=0",
                                          "methods=[ar,sd,static_ensemble]", "decode.max_new_tokens=6"])
    metrics = run(cfg)
    recs = {(r["id"], r["method"]): r for r in read_jsonl(tmp_path / "run" / "samples.jsonl")}
    assert len(recs) == 6
    pair = load_pair(cfg.pair)  # the tiny pair is seeded: the same weights as the harness's copy
    for (ex_id, method), r in recs.items():
        sc, turns = r["scores"], r["turns"]
        q = {"mt_bench/1": ["What is 2 + 3?", "And times 4?"], "mt_bench/2": ["Write a haiku.", "Make it sadder."]}
        # turn 2 is scored given the method's OWN first answer, exactly as it was generated
        msgs = [{"role": "user", "content": q[ex_id][0]}, {"role": "assistant", "content": turns[0]["completion"]},
                {"role": "user", "content": q[ex_id][1]}]
        want = target_nll(pair.target, torch.tensor(pair.render(msgs)), torch.tensor(turns[1]["tokens"]))
        assert sc["target_nll_turn2"] == pytest.approx(want, rel=1e-4)
        n1, n2 = len(turns[0]["tokens"]), len(turns[1]["tokens"])
        assert sc["target_nll"] == pytest.approx((sc["target_nll_turn1"] * n1 + want * n2) / (n1 + n2), rel=1e-6)
        if method == "ar":
            assert "rouge_l" not in sc  # the reference itself
        else:
            ref = recs[(ex_id, "ar")]["turns"]
            assert sc["rouge_l_turn1"] == rouge_l(turns[0]["completion"], ref[0]["completion"])
            assert sc["rouge_l"] == pytest.approx((sc["rouge_l_turn1"] + sc["rouge_l_turn2"]) / 2)
    # greedy question: SD reproduces AR, so it has the same NLL and full overlap
    sd, ar = recs[("mt_bench/1", "sd")], recs[("mt_bench/1", "ar")]
    assert sd["turns"][0]["tokens"] == ar["turns"][0]["tokens"]
    assert sd["scores"]["target_nll_turn1"] == ar["scores"]["target_nll_turn1"]
    q = metrics["methods"]["static_ensemble"]["quality"]
    assert {"target_nll", "target_nll_ci_low", "rouge_l", "rouge_l_ci_high"} <= set(q)
    # a rerun recomputes nothing
    before = (tmp_path / "run" / "samples.jsonl").read_text()
    run(cfg)
    assert (tmp_path / "run" / "samples.jsonl").read_text() == before


def test_fidelity_without_ar_gives_nll_only(tmp_path):
    data = _mt_bench_dir(tmp_path / "mtb")
    cfg = compose_eval(tmp_path / "run", ["pair=tiny", "dataset=mt_bench", f"dataset.path={data}", "warmup=0",
                                          "dataset.limit=1", "methods=[sd]", "decode.max_new_tokens=4"])
    run(cfg)
    (rec,) = read_jsonl(tmp_path / "run" / "samples.jsonl")
    assert rec["scores"]["target_nll"] > 0 and "rouge_l" not in rec["scores"]

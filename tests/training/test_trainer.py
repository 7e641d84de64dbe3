"""End-to-end trainer runs on the tiny pair through a real DeepSpeed engine (CPU, gloo)."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file
from train_helpers import compose_train

from relaxspec.decoding.methods import load_head
from relaxspec.training.trainer import DiversedTrainer

BASE = ["+experiment=diversed_gsm8k_tiny", "pair=tiny", "trainer.max_new_tokens=4", "trainer.prompts_per_round=4",
        "trainer.collect_batch_size=4", "trainer.micro_batch_size=2", "trainer.lr=0.05", "trainer.warmup_steps=1",
        "trainer.top_k_store=8", "logger=none"]


def _run(overrides, out, pair):
    cfg = compose_train([*BASE, *overrides, f"output_dir={out}"])
    trainer = DiversedTrainer(cfg, pair=pair)
    try:
        trainer.setup()
        return trainer, trainer.train()
    finally:
        trainer.cleanup()


def _head(path):
    return load_file(str(path / "head.safetensors"))


@pytest.mark.parametrize("stage", [0, 2])
def test_two_steps_change_the_head(tmp_path, tiny_pair, stage):
    trainer, result = _run([f"trainer.zero_stage={stage}", "trainer.rounds=1", "trainer.save_every=1"], tmp_path,
                           tiny_pair)
    assert result["finished"] and result["global_step"] == result["total_steps"] == 2
    final = _head(tmp_path / "head")
    w = final["net.weight"]
    assert not torch.allclose(w[0], w[1]), "the two rows start equal; training must separate them"
    meta = json.loads((tmp_path / "head" / "head.json").read_text())
    assert meta["trained"] is True and meta["steps"] == 2 and meta["mix"] == "prob" and meta["pair"] == "tiny"
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_1", "step_2"]
    assert (tmp_path / "checkpoints" / "step_2" / "deepspeed").is_dir()
    state = json.loads((tmp_path / "checkpoints" / "step_2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["baseline"]["count"] == 2
    manifest = json.loads((tmp_path / "cache" / "round_000" / "rank_0" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["sampling"]["temperature"] == 1.0 and manifest["pair"] == "tiny"
    assert manifest["truncation"] == {"top_k_store": 8} and manifest["chat_template_sha"]
    log = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    steps = [r for r in log if "train/loss" in r]
    assert len(steps) == 2 and all("train/w_std" in r and "train/accept_est" in r for r in steps)
    # the output plugs into evaluate.py: method.head=<output_dir>/head
    head = load_head(OmegaConf.create({"head": str(tmp_path / "head"), "mix": "prob"}), tiny_pair)
    assert torch.allclose(head.net.weight, w)


def test_killed_and_resumed_run_matches_uninterrupted(tmp_path, tiny_pair):
    over = ["trainer.rounds=2", "trainer.save_every=1"]
    _, full = _run(over, tmp_path / "full", tiny_pair)
    assert full["global_step"] == 4
    # "killed" after 3 steps (mid round 1), then a new trainer resumes from the last checkpoint
    _, part = _run([*over, "trainer.stop_after_steps=3"], tmp_path / "resumed", tiny_pair)
    assert not part["finished"] and part["global_step"] == 3
    assert not (tmp_path / "resumed" / "head").exists()
    trainer, rest = _run([*over, "trainer.resume=true"], tmp_path / "resumed", tiny_pair)
    assert rest["finished"] and rest["global_step"] == 4
    assert [r["rollout/reused_shards"] for r in rest["rounds"]] == [1]  # round 1's rollouts came from the cache
    a, b = _head(tmp_path / "full" / "head"), _head(tmp_path / "resumed" / "head")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    sa = json.loads((tmp_path / "full" / "checkpoints" / "step_4" / "trainer_state.json").read_text())
    sb = json.loads((tmp_path / "resumed" / "checkpoints" / "step_4" / "trainer_state.json").read_text())
    assert sa["baseline"]["value"] == pytest.approx(sb["baseline"]["value"])

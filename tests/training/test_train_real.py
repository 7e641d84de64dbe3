"""Smoke run of the trainer on the embedded Qwen2.5-Coder pair (1 round, 2 GSM8K train prompts, 16 tokens)."""

from __future__ import annotations

import json

import pytest
from train_helpers import compose_train

from relaxspec.training.trainer import DiversedTrainer


@pytest.mark.real
def test_real_pair_smoke(tmp_path, real_pair):
    cfg = compose_train([
        "+experiment=diversed_gsm8k_qwen25", "trainer.rounds=1", "trainer.prompts_per_round=2",
        "trainer.max_new_tokens=16", "trainer.collect_batch_size=2", "trainer.micro_batch_size=2",
        "trainer.epochs_per_round=1", "trainer.top_k_store=16", f"output_dir={tmp_path}",
    ])
    trainer = DiversedTrainer(cfg, pair=real_pair)
    try:
        trainer.setup()
        result = trainer.train()
    finally:
        trainer.cleanup()
    assert result["finished"] and result["global_step"] == 1
    meta = json.loads((tmp_path / "head" / "head.json").read_text())
    assert meta["d_draft"] == 896 and meta["d_target"] == 1536 and meta["trained"]
    rnd = result["rounds"][0]
    assert 0.0 <= rnd["rollout/accept_rate"] <= 1.0 and rnd["rollout/mean_len"] > 0
    assert 0.0 < result["final"]["accept_est"] <= 1.0

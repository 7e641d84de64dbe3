"""validate_trainer, the optimizer-step count, the DeepSpeed dict and the experiment configs."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf
from train_helpers import CONF, compose_train

from relaxspec.config import ConfigError, validate
from relaxspec.training.config import deepspeed_config, total_optimizer_steps, validate_trainer


def _trainer(**over):
    cfg = compose_train(["+experiment=diversed_gsm8k_tiny", "output_dir=/tmp/x"])
    for k, v in over.items():
        OmegaConf.update(cfg, f"trainer.{k}", v, force_add=True)
    return cfg.trainer


@pytest.mark.parametrize(
    ("key", "value", "msg"),
    [
        ("lr", -1.0, "trainer.lr must be > 0"),
        ("lr", 0.0, "trainer.lr must be > 0"),
        ("zero_stage", 4, "zero_stage must be 0, 1, 2 or 3"),
        ("zero_stage", -1, "zero_stage must be 0, 1, 2 or 3"),
        ("temperature", 0.0, "never greedy"),
        ("micro_batch_size", 0, "micro_batch_size must be >= 1"),
        ("reg_lambda", -0.5, "reg_lambda must be >= 0"),
        ("reg_mode", "adaptive", "reg_mode must be one of"),
        ("normalize", "mean", "normalize must be one of"),
        ("baseline_momentum", 1.0, "baseline_momentum"),
        ("importance_clip", 0.5, "importance_clip"),
        ("top_p", 0.0, "top_p"),
        ("warmup_steps", -2, "warmup_steps"),
        ("rounds", 0, "rounds must be >= 1"),
        ("deepspeed.bf16.enabled", True, "fp32"),
    ],
)
def test_validate_trainer_rejects_bad_values(key, value, msg):
    with pytest.raises(ConfigError) as err:
        validate_trainer(_trainer(**{key: value}))
    assert msg in str(err.value)
    assert "\n" not in str(err.value)


def test_validate_trainer_rejects_unknown_keys_and_wrong_types():
    with pytest.raises(ConfigError, match="trainer"):
        validate_trainer(_trainer(learning_rate=1.0))
    with pytest.raises(ConfigError, match="trainer"):
        validate_trainer(_trainer(rounds="many"))


def test_total_steps_and_deepspeed_dict():
    t = validate_trainer(_trainer(rounds=3, prompts_per_round=10, micro_batch_size=2, grad_accum=2,
                                  epochs_per_round=2, warmup_steps=4, zero_stage=2))
    # per rank: ceil(10 / world) rollouts -> ceil(. / (2 * 2)) steps per epoch
    assert total_optimizer_steps(t, 1) == 3 * 2 * 3
    assert total_optimizer_steps(t, 2) == 3 * 2 * 2
    assert total_optimizer_steps(t, 4) == 3 * 2 * 1
    ds = deepspeed_config(t, 2)
    assert ds["train_batch_size"] == 2 * 2 * 2
    assert ds["train_micro_batch_size_per_gpu"] == 2 and ds["gradient_accumulation_steps"] == 2
    assert ds["zero_optimization"]["stage"] == 2
    assert ds["scheduler"]["params"]["total_num_steps"] == 12
    assert ds["scheduler"]["params"]["warmup_num_steps"] == 4
    assert ds["optimizer"]["type"] == "AdamW" and ds["gradient_clipping"] == t.max_grad_norm
    assert ds["bf16"]["enabled"] is False and ds["fp16"]["enabled"] is False
    no_warm = deepspeed_config(validate_trainer(_trainer(warmup_steps=0)), 1)
    assert no_warm["scheduler"]["params"]["warmup_min_ratio"] == 1.0


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "experiment").glob("diversed_*.yaml")))
def test_experiments_compose_and_validate(name):
    cfg = compose_train([f"+experiment={name}", "output_dir=/tmp/x"])
    validate(cfg)
    t = validate_trainer(cfg.trainer)
    assert t.temperature > 0
    assert cfg.method.rule == "diversed"
    assert Path(CONF / "experiment" / f"{name}.yaml").read_text().startswith("# @package _global_")


def test_paper_gpu_experiments_match_the_paper_settings():
    for name in ("diversed_gsm8k_llama31", "diversed_gsm8k_qwen3", "diversed_humaneval_llama31",
                 "diversed_humaneval_qwen3"):
        cfg = compose_train([f"+experiment={name}", "output_dir=/tmp/x"])
        t = validate_trainer(cfg.trainer)
        assert t.lr == 5e-4 and t.max_new_tokens == 128 and t.zero_stage == 2
        assert t.prompts_per_round * t.rounds == 2 * (t.num_examples or 0) or cfg.dataset.name == "humaneval"
        assert t.micro_batch_size * t.grad_accum == 8

"""Trainer config: validation of ``cfg.trainer``, the optimizer-step count and the DeepSpeed config dict.

`validate_trainer(cfg.trainer)` raises `relaxspec.config.ConfigError` with a one-line message for bad values
(negative lr, zero_stage outside 0..3, greedy rollouts, ...). `total_optimizer_steps` is THE step count that
the warm-up + cosine schedule is built with (the reference release computed it wrongly, so its cosine restarted
every 4 of 100 steps). `deepspeed_config` turns the Hydra ``trainer.deepspeed`` node into the dict that
``deepspeed.initialize`` takes, with the batch sizes and the schedule length filled in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from relaxspec.config import ConfigError

__all__ = [
    "NORMALIZE",
    "REG_MODES",
    "TrainerConfig",
    "deepspeed_config",
    "steps_per_epoch",
    "total_optimizer_steps",
    "validate_trainer",
]

REG_MODES = ("fixed", "relative")
NORMALIZE = ("budget", "sequence", "token")


@dataclass
class TrainerConfig:
    """Schema of ``conf/trainer/*.yaml`` (defaults live in the YAML; see conf/trainer/default.yaml)."""

    rounds: int = MISSING
    prompts_per_round: int = MISSING
    num_examples: int | None = None
    split: str = "auto"
    holdout_fraction: float = 0.5
    split_seed: int = 0
    max_new_tokens: int = MISSING
    temperature: float = MISSING
    top_k: int = 0
    top_p: float = 1.0
    draft_length: int = 5
    collect_batch_size: int = 8
    forward_batch_size: int = 4
    max_prompt_tokens: int = 2048
    epochs_per_round: int = 1
    micro_batch_size: int = MISSING
    grad_accum: int = 1
    lr: float = MISSING
    weight_decay: float = 0.0
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    reg_lambda: float = 1.0
    reg_mode: str = "fixed"
    normalize: str = "budget"
    baseline_momentum: float = 0.9
    importance_clip: float = 2.0
    reward_key: str | None = None
    head_hidden: int | None = None
    head_init_std: float = 0.01
    head: str | None = None
    top_k_store: int = 64
    save_every: int = 10
    keep_checkpoints: int = 3
    resume: bool = False
    stop_after_steps: int | None = None
    zero_stage: int = 0
    seed: int | None = None
    deepspeed: Any = field(default_factory=dict)


def _fail(msg: str) -> None:
    raise ConfigError(msg)


def validate_trainer(node: Any) -> DictConfig:
    """Check ``cfg.trainer``; return it typed. Raises ConfigError (one line) on the first bad value."""
    try:
        raw = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
        t = OmegaConf.merge(OmegaConf.structured(TrainerConfig), raw)
        OmegaConf.to_container(t, resolve=True, throw_on_missing=True)
    except ConfigError:
        raise
    except Exception as exc:  # omegaconf raises several types; all mean "bad config"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        key = getattr(exc, "full_key", None)
        raise ConfigError(f"invalid config at trainer{'.' + key if key else ''}: {first}") from None
    positive = ("rounds", "prompts_per_round", "max_new_tokens", "draft_length", "collect_batch_size",
                "forward_batch_size", "max_prompt_tokens", "epochs_per_round", "micro_batch_size", "grad_accum",
                "save_every")
    for name in positive:
        if int(t[name]) < 1:
            _fail(f"trainer.{name} must be >= 1, got {t[name]}")
    if t.num_examples is not None and t.num_examples < 1:
        _fail(f"trainer.num_examples must be >= 1 or null, got {t.num_examples}")
    if not (0.0 < t.holdout_fraction < 1.0):
        _fail(f"trainer.holdout_fraction must be in (0, 1), got {t.holdout_fraction}")
    if not t.temperature > 0:  # also NaN
        _fail(f"trainer.temperature must be > 0: REINFORCE needs samples from the policy, never greedy rollouts "
              f"(got {t.temperature})")
    if t.top_k < 0:
        _fail(f"trainer.top_k must be >= 0 (0 = off), got {t.top_k}")
    if not (0.0 < t.top_p <= 1.0):
        _fail(f"trainer.top_p must be in (0, 1], got {t.top_p}")
    if not t.lr > 0:
        _fail(f"trainer.lr must be > 0, got {t.lr}")
    if not t.weight_decay >= 0:
        _fail(f"trainer.weight_decay must be >= 0, got {t.weight_decay}")
    if t.warmup_steps < 0:
        _fail(f"trainer.warmup_steps must be >= 0, got {t.warmup_steps}")
    if not t.max_grad_norm >= 0:
        _fail(f"trainer.max_grad_norm must be >= 0 (0 = no clipping), got {t.max_grad_norm}")
    if not t.reg_lambda >= 0:
        _fail(f"trainer.reg_lambda must be >= 0 (the regulariser always raises acceptance), got {t.reg_lambda}")
    if t.reg_mode not in REG_MODES:
        _fail(f"trainer.reg_mode must be one of {REG_MODES}, got '{t.reg_mode}'")
    if t.normalize not in NORMALIZE:
        _fail(f"trainer.normalize must be one of {NORMALIZE}, got '{t.normalize}'")
    if not (0.0 <= t.baseline_momentum < 1.0):
        _fail(f"trainer.baseline_momentum must be in [0, 1), got {t.baseline_momentum}")
    if not t.importance_clip >= 1.0:
        _fail(f"trainer.importance_clip must be >= 1, got {t.importance_clip}")
    if t.head_hidden is not None and t.head_hidden < 1:
        _fail(f"trainer.head_hidden must be >= 1 or null, got {t.head_hidden}")
    if not t.head_init_std >= 0:
        _fail(f"trainer.head_init_std must be >= 0, got {t.head_init_std}")
    if t.top_k_store < 0:
        _fail(f"trainer.top_k_store must be >= 0, got {t.top_k_store}")
    if t.keep_checkpoints < 1:
        _fail(f"trainer.keep_checkpoints must be >= 1, got {t.keep_checkpoints}")
    if t.stop_after_steps is not None and t.stop_after_steps < 1:
        _fail(f"trainer.stop_after_steps must be >= 1 or null, got {t.stop_after_steps}")
    if t.zero_stage not in (0, 1, 2, 3):
        _fail(f"trainer.zero_stage must be 0, 1, 2 or 3, got {t.zero_stage}")
    ds = t.deepspeed
    if ds:
        for fmt in ("bf16", "fp16"):
            if ds.get(fmt) and ds[fmt].get("enabled"):
                _fail(f"trainer.deepspeed.{fmt}.enabled must be false: the weight head trains in fp32 "
                      f"(a low-precision head without fp32 master weights is a bug of the reference release)")
        zero = ds.get("zero_optimization") or {}
        if zero.get("stage") is not None and int(zero["stage"]) not in (0, 1, 2, 3):
            _fail(f"trainer.deepspeed.zero_optimization.stage must be 0..3, got {zero['stage']}")
    return t


# ----------------------------------------------------------------------------------------- step count


def local_sequences(prompts_per_round: int, world_size: int) -> int:
    """Rollouts per rank and round: the round's prompts striped over the ranks (the longest stripe)."""
    return math.ceil(prompts_per_round / world_size)


def steps_per_epoch(prompts_per_round: int, micro_batch_size: int, grad_accum: int, world_size: int) -> int:
    """Optimizer steps per pass over one round's rollouts (partial last batches are filled by wrap-around)."""
    return math.ceil(local_sequences(prompts_per_round, world_size) / (micro_batch_size * grad_accum))


def total_optimizer_steps(t: Any, world_size: int) -> int:
    """rounds x epochs_per_round x ceil(samples / (micro batch x grad accum x world size))."""
    return int(t.rounds) * int(t.epochs_per_round) * steps_per_epoch(
        int(t.prompts_per_round), int(t.micro_batch_size), int(t.grad_accum), world_size
    )


def deepspeed_config(t: Any, world_size: int) -> dict[str, Any]:
    """The ``deepspeed.initialize`` config from ``trainer.deepspeed`` with batch sizes and schedule filled in."""
    ds = OmegaConf.to_container(t.deepspeed, resolve=True) if isinstance(t.deepspeed, DictConfig) \
        else dict(t.deepspeed or {})
    ds = dict(ds)  # type: ignore[arg-type]
    micro, accum = int(t.micro_batch_size), int(t.grad_accum)
    ds["train_micro_batch_size_per_gpu"] = micro
    ds["gradient_accumulation_steps"] = accum
    ds["train_batch_size"] = micro * accum * world_size
    ds.setdefault("zero_optimization", {})["stage"] = int(t.zero_stage)
    total = total_optimizer_steps(t, world_size)
    sched = ds.get("scheduler")
    if sched:
        params = sched.setdefault("params", {})
        if sched.get("type") == "WarmupCosineLR":
            params["total_num_steps"] = total
            warm = int(t.warmup_steps)
            # DeepSpeed needs warmup_num_steps >= 1; "no warm-up" = a warm-up that starts at ratio 1.
            params["warmup_num_steps"] = max(1, min(warm, total))
            if warm == 0:
                params["warmup_min_ratio"] = 1.0
        elif "total_num_steps" in params:
            params["total_num_steps"] = total
    return ds

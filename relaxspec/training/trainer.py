"""The DIVERSED weight-head trainer: on-policy rounds of (collect rollouts -> update the head) on DeepSpeed.

    trainer = DiversedTrainer(cfg)      # cfg = the composed conf/train.yaml
    trainer.setup()                     # process group, pair, task, head, engine, logger, resume
    trainer.train()                     # rounds: collect(round) -> epochs of optimizer steps -> checkpoints
    trainer.cleanup()

Round r: the round's prompts (a seeded pool of training prompts, ``prompts_per_round`` per round, cycling through
a pool of ``num_examples``) are striped over the ranks; each rank samples completions from the ensemble policy
pi_theta with the CURRENT head (relaxspec's speculative loop with the diversed rule and the exact bonus token is
an exact sampler of pi_theta) at the training temperature, scores them with the task, and stores the pair-cache
features (relaxspec.training.cache). Then ``epochs_per_round`` passes of optimizer steps over these rollouts
(importance-weighted by pi_theta / pi_old once the head has moved). Every rank does the same number of
micro-steps: its stripe is padded by wrap-around, and the schedule length is
rounds x epochs x ceil(ceil(prompts / world) / (micro x accum)) optimizer steps.

Files under ``output_dir``: ``head/`` (final head, loadable by ``evaluate.py method=diversed
method.head=<output_dir>/head``), ``checkpoints/step_N/`` (head, DeepSpeed state, trainer_state.json,
rng.safetensors; written to a temp dir and renamed, ``checkpoints/latest`` names the newest), ``cache/round_R/
rank_K/`` (pair cache), ``train_examples.json`` (the prompt ids used, and the held-out ids for tasks without a
train split), ``log.jsonl`` (+ W&B with ``logger=wandb``), ``train_summary.json``.

A fresh run (``trainer.resume=false``) into a directory that already holds checkpoints deletes them first;
``trainer.resume=true`` continues from the newest complete checkpoint (same head, optimizer, schedule, baseline
and data order as an uninterrupted run).
"""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from relaxspec.decoding.generate import StopChecker, generate_speculative
from relaxspec.decoding.lm import CausalLM
from relaxspec.decoding.sampling import SamplingParams
from relaxspec.distributed import barrier
from relaxspec.models.pairs import Pair, hidden_size, load_pair
from relaxspec.models.weight_head import WeightHead
from relaxspec.training import cache as pair_cache
from relaxspec.training.config import (
    deepspeed_config,
    steps_per_epoch,
    total_optimizer_steps,
    validate_trainer,
)
from relaxspec.training.distributed import DistInfo, all_mean, init_distributed
from relaxspec.training.objective import RunningBaseline, diversed_loss, log_nu, sequence_sum
from relaxspec.utils.io import atomic_write_json, atomic_write_text
from relaxspec.utils.logging import MetricLogger, build_logger
from relaxspec.utils.provenance import provenance
from relaxspec.verify import get_rule

log = logging.getLogger(__name__)

STATE_FORMAT = "relaxspec.trainer_state/1"


def _cut_stop(text: str, stops: list[str]) -> str:
    cut = len(text)
    for s in stops:
        i = text.find(s)
        if s and i != -1:
            cut = min(cut, i)
    return text[:cut]


def _mix_seed(*parts: int) -> int:
    h = 0x9E3779B97F4A7C15
    for p in parts:
        h = (h * 6364136223846793005 + int(p) + 1442695040888963407) % (1 << 63)
    return h


class DiversedTrainer:
    """Trains a `WeightHead` with sequence-level REINFORCE + the acceptance regulariser."""

    def __init__(self, cfg: DictConfig, *, pair: Pair | None = None, task: Any = None):
        self.cfg = cfg
        self.t = validate_trainer(cfg.trainer)
        self.out = Path(str(cfg.output_dir))
        self.mix = str(cfg.method.get("mix", "prob") if cfg.get("method") is not None else "prob")
        self.seed = int(self.t.seed if self.t.seed is not None else cfg.get("seed", 0))
        self.params = SamplingParams(float(self.t.temperature), int(self.t.top_k), float(self.t.top_p))
        self._pair, self._task = pair, task
        self.global_step = 0
        self.baseline = RunningBaseline(float(self.t.baseline_momentum))
        self.timings: dict[str, float] = {"collect_s": 0.0, "generate_s": 0.0, "features_s": 0.0, "train_s": 0.0,
                                          "new_tokens": 0.0, "micro_steps": 0.0}
        self.last_metrics: dict[str, Any] = {}
        self.round_metrics: list[dict[str, Any]] = []
        self.engine: Any = None
        self.logger: MetricLogger | None = None

    # ------------------------------------------------------------------------------------------- setup

    def setup(self) -> DiversedTrainer:
        t0 = time.perf_counter()
        self.dist: DistInfo = init_distributed()
        import deepspeed

        if self.dist.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
        barrier()
        self.pair = self._pair if self._pair is not None else load_pair(self.cfg.pair)
        if self._task is not None:
            self.task = self._task
        else:
            from relaxspec.tasks import build_task

            self.task = build_task(self.cfg.dataset)
        self.device = next(self.pair.target.parameters()).device
        self.stopper = StopChecker(self.pair.eos_ids, list(getattr(self.task, "stop", []) or []), self.pair.tokenizer)
        self.reward_key = self.t.reward_key or getattr(self.task, "primary_metric", "accuracy")
        self.pool, self.heldout = self._training_examples()

        d_q, d_p = hidden_size(self.pair.draft), hidden_size(self.pair.target)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            head = WeightHead(d_q, d_p, hidden=self.t.head_hidden, init_std=float(self.t.head_init_std))
        if self.t.head:
            warm = WeightHead.load(self.t.head, d_draft=d_q, d_target=d_p)
            if warm.hidden != head.hidden:
                raise ValueError(f"trainer.head '{self.t.head}' has hidden={warm.hidden}, "
                                 f"trainer.head_hidden={self.t.head_hidden}")
            head.load_state_dict(warm.state_dict())
        self.head_dims = (d_q, d_p)

        self.total_steps = total_optimizer_steps(self.t, self.dist.world_size)
        self.steps_per_epoch = steps_per_epoch(int(self.t.prompts_per_round), int(self.t.micro_batch_size),
                                               int(self.t.grad_accum), self.dist.world_size)
        self.steps_per_round = self.steps_per_epoch * int(self.t.epochs_per_round)
        self.ds_config = deepspeed_config(self.t, self.dist.world_size)
        self.engine, _, _, _ = deepspeed.initialize(model=head, model_parameters=[p for p in head.parameters()],
                                                    config=self.ds_config)

        ckpt_root = self.out / "checkpoints"
        if self.t.resume:
            found = self.latest_checkpoint()
            if found is not None:
                self._load_checkpoint(found)
            elif self.dist.is_main:
                log.warning("trainer.resume=true but no checkpoint in %s: starting fresh", ckpt_root)
        elif self.dist.is_main and ckpt_root.exists():
            shutil.rmtree(ckpt_root)
        barrier()
        self.logger = build_logger(self.cfg.logger, self.out, self.cfg, rank=self.dist.rank)
        self.timings["setup_s"] = time.perf_counter() - t0
        return self

    def _training_examples(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The prompt pool. Tasks without a train split use the first `holdout_fraction` of a seeded
        permutation of their evaluation split for training; the rest is listed as held out."""
        t, task = self.t, self.task
        splits = tuple(getattr(task, "splits", ("test",)))
        split = str(t.split)
        if split == "auto":
            split = "train" if "train" in splits else getattr(task, "default_split", splits[0])
        eval_split = self.cfg.dataset.get("split") if self.cfg.get("dataset") is not None else None
        holdout_mode = split != "train" and (split == eval_split or split == getattr(task, "default_split", None))
        n_pool = int(t.num_examples or int(t.rounds) * int(t.prompts_per_round))
        heldout: list[str] = []
        if holdout_mode:
            rows = task.examples(split, limit=None, seed=None)
            ids = sorted(str(r["id"]) for r in rows)
            random.Random(int(t.split_seed)).shuffle(ids)
            n_train = int(math.floor(len(ids) * float(t.holdout_fraction)))
            train_ids, heldout = set(ids[:n_train]), ids[n_train:]
            order = {i: k for k, i in enumerate(ids)}
            pool = sorted((r for r in rows if str(r["id"]) in train_ids), key=lambda r: order[str(r["id"])])
            pool = pool[:n_pool]
        else:
            pool = task.examples(split, limit=n_pool, seed=int(t.split_seed))
        if not pool:
            raise ValueError(f"no training examples in split '{split}' of {getattr(task, 'name', task)}")
        if self.dist.is_main:
            atomic_write_json(self.out / "train_examples.json", {
                "task": getattr(task, "name", None), "split": split, "holdout": holdout_mode,
                "holdout_fraction": float(t.holdout_fraction) if holdout_mode else None,
                "split_seed": int(t.split_seed), "train_ids": [str(r["id"]) for r in pool],
                "heldout_ids": heldout,
            })
        return pool, heldout

    # ------------------------------------------------------------------------------------------- helpers

    def prompt_ids(self, example: dict[str, Any]) -> list[int]:
        if getattr(self.task, "chat", True):
            ids = self.pair.render(self.task.messages(example, []))
        else:
            ids = self.pair.render(self.task.raw_prompt(example))
        limit = int(self.t.max_prompt_tokens)
        return ids[-limit:] if len(ids) > limit else ids

    def round_examples(self, r: int) -> list[dict[str, Any]]:
        """This rank's stripe of round r's prompts (the pool is cycled)."""
        n, per = len(self.pool), int(self.t.prompts_per_round)
        chosen = [self.pool[(r * per + i) % n] for i in range(per)]
        return chosen[self.dist.rank :: self.dist.world_size]

    def head_state(self) -> dict[str, torch.Tensor]:
        """A full copy of the head's parameters (gathered under ZeRO-3; collective with several ranks)."""
        import deepspeed

        module = self.engine.module
        with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
            return {k: v.detach().clone().cpu() for k, v in module.state_dict().items()}

    def head_snapshot(self, **meta: Any) -> WeightHead:
        d_q, d_p = self.head_dims
        info = self.pair.info
        base = {"mix": self.mix, "trained": self.global_step > 0, "steps": self.global_step, "pair": self.pair.name,
                "draft_id": (info.get("draft") or {}).get("id"), "target_id": (info.get("target") or {}).get("id"),
                "temperature": float(self.t.temperature), "trainer": "relaxspec.training/diversed"}
        head = WeightHead(d_q, d_p, hidden=self.t.head_hidden, meta={**base, **meta})
        head.load_state_dict(self.head_state())
        return head.to(self.device).eval()

    # ------------------------------------------------------------------------------------------- collect

    def cache_dir(self, r: int) -> Path:
        return self.out / "cache" / f"round_{r:03d}" / f"rank_{self.dist.rank}"

    def collect(self, r: int) -> pair_cache.RoundData:
        """Rollouts of round r from the current head, written to (or reused from) the pair cache."""
        t0 = time.perf_counter()
        head = self.head_snapshot()
        examples = self.round_examples(r)
        cb = int(self.t.collect_batch_size)
        chunks = [examples[i : i + cb] for i in range(0, len(examples), cb)]
        info = self.pair.info
        key = {
            "pair": self.pair.name,
            "models": {role: {k: (info.get(role) or {}).get(k) for k in ("id", "revision", "dtype", "backend")}
                       for role in ("draft", "target")},
            "chat_template_sha": pair_cache.chat_template_hash(self.pair.tokenizer),
            "task": {"name": getattr(self.task, "name", None), "version": getattr(self.task, "version", None),
                     "reward_key": self.reward_key},
            "sampling": {"temperature": self.params.temperature, "top_k": self.params.top_k,
                         "top_p": self.params.top_p},
            "max_new_tokens": int(self.t.max_new_tokens), "draft_length": int(self.t.draft_length),
            "mix": self.mix, "truncation": {"top_k_store": int(self.t.top_k_store)},
            "round": r, "rank": self.dist.rank, "world_size": self.dist.world_size, "seed": self.seed,
            "example_ids": [str(e["id"]) for e in examples],
            "head_sha": pair_cache.state_hash(head.state_dict()),
        }
        stats = {"gen_s": 0.0, "tf_s": 0.0, "new_tokens": 0, "made": 0}

        def make(i: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
            batch = chunks[i]
            prompts = [self.prompt_ids(e) for e in batch]
            gen = torch.Generator(device=self.device).manual_seed(_mix_seed(self.seed, r, self.dist.rank, i))
            g0 = time.perf_counter()
            outs = generate_speculative(
                CausalLM(self.pair.draft), CausalLM(self.pair.target), prompts, params=self.params,
                max_new_tokens=[int(self.t.max_new_tokens)] * len(batch), stopper=self.stopper,
                rule=get_rule("diversed"), rule_kwargs={"mix": self.mix}, k=int(self.t.draft_length), head=head,
                exact_bonus=True, generator=gen,
            )
            g1 = time.perf_counter()
            completions = [o.tokens for o in outs]
            texts = [_cut_stop(self.pair.tokenizer.decode(c, skip_special_tokens=True),
                               list(getattr(self.task, "stop", []) or [])) for c in completions]
            scores = self.task.score_many(batch, [[x] for x in texts])
            rewards = [float(s.get(self.reward_key) or 0.0) for s in scores]
            g2 = time.perf_counter()
            feats = pair_cache.teacher_forced_features(
                self.pair.draft, self.pair.target, prompts, completions, self.params,
                top_k_store=int(self.t.top_k_store), batch_size=int(self.t.forward_batch_size))
            g3 = time.perf_counter()
            with torch.no_grad():
                w = head(feats["h_q"].to(self.device), feats["h_p"].to(self.device)).cpu()
                lens = feats["offsets"].diff()
                seq_id = torch.repeat_interleave(torch.arange(len(batch)), lens)
                trunc = None
                if self.mix == "logit":
                    trunc = {k: feats[k] for k in ("sup_p", "sup_q", "sup_mask", "rest_p", "rest_q")}
                logpi_old = sequence_sum(log_nu(w, feats["p_y"], feats["q_y"], self.mix, trunc), seq_id, len(batch))
            feats["reward"] = torch.tensor(rewards, dtype=torch.float32)
            feats["logpi_old"] = logpi_old.float()
            n_new = sum(len(c) for c in completions)
            stats["gen_s"] += g1 - g0
            stats["tf_s"] += g3 - g2
            stats["new_tokens"] += n_new
            stats["made"] += 1
            meta = {
                "ids": [str(e["id"]) for e in batch], "rewards": rewards,
                "finish": [o.finish_reason for o in outs], "new_tokens": [len(c) for c in completions],
                "drafted": sum(o.stats.drafted for o in outs), "accepted": sum(o.stats.accepted for o in outs),
                "w_sum": sum(o.stats.w_target_sum for o in outs), "w_count": sum(o.stats.w_target_count for o in outs),
                "generate_s": g1 - g0, "features_s": g3 - g2, "texts": texts,
            }
            return feats, meta

        manifest = pair_cache.collect_shards(
            self.cache_dir(r), key, len(chunks), make, trust_complete=bool(self.t.resume),
            progress=self.dist.is_main, desc=f"rollouts round {r}")
        data, _ = pair_cache.load_round(self.cache_dir(r))
        shards = list(manifest["shards"].values())
        drafted = sum(s["drafted"] for s in shards)
        gen_s = sum(s["generate_s"] for s in shards)
        new_tok = sum(sum(s["new_tokens"]) for s in shards)
        rm = {
            "round": r,
            "rollout/reward": float(data.seq["reward"].mean()) if len(data) else 0.0,
            "rollout/accept_rate": sum(s["accepted"] for s in shards) / drafted if drafted else 0.0,
            "rollout/w_mean": sum(s["w_sum"] for s in shards) / max(1, sum(s["w_count"] for s in shards)),
            "rollout/mean_len": new_tok / max(1, len(data)),
            "rollout/tokens_per_s": new_tok / gen_s if gen_s > 0 else None,
            "rollout/features_s": sum(s["features_s"] for s in shards),
            "rollout/generate_s": gen_s,
            "rollout/reused_shards": len(chunks) - stats["made"],
        }
        self.timings["collect_s"] += time.perf_counter() - t0
        self.timings["generate_s"] += stats["gen_s"]
        self.timings["features_s"] += stats["tf_s"]
        self.timings["new_tokens"] += stats["new_tokens"]
        self.round_metrics.append(rm)
        if self.logger is not None:
            self.logger.log(rm, step=self.global_step)
        return data

    # ------------------------------------------------------------------------------------------- train

    def _epoch_order(self, r: int, epoch: int, n: int) -> list[int]:
        perm = list(range(n))
        random.Random(_mix_seed(self.seed, r, epoch, self.dist.rank, 7)).shuffle(perm)
        need = self.steps_per_epoch * int(self.t.grad_accum) * int(self.t.micro_batch_size)
        return [perm[i % n] for i in range(need)] if n else []

    def train(self) -> dict[str, Any]:
        from tqdm.auto import tqdm

        t = self.t
        micro, accum = int(t.micro_batch_size), int(t.grad_accum)
        stop_at = int(t.stop_after_steps) if t.stop_after_steps is not None else None
        bar = tqdm(total=self.total_steps, initial=self.global_step, desc="train steps", disable=not self.dist.is_main)
        for r in range(int(t.rounds)):
            if (r + 1) * self.steps_per_round <= self.global_step:
                continue
            if stop_at is not None and self.global_step >= stop_at:
                break
            data = self.collect(r)
            t0 = time.perf_counter()
            if len(data) == 0:
                raise RuntimeError(f"round {r}: rank {self.dist.rank} has no rollouts")
            for epoch in range(int(t.epochs_per_round)):
                order = self._epoch_order(r, epoch, len(data))
                for s in range(self.steps_per_epoch):
                    g = r * self.steps_per_round + epoch * self.steps_per_epoch + s
                    if g < self.global_step:
                        continue
                    acc: dict[str, list[float]] = {}
                    ws: list[torch.Tensor] = []
                    for a in range(accum):
                        idx = order[(s * accum + a) * micro : (s * accum + a + 1) * micro]
                        m = self._micro_step(data, idx, ws)
                        for k, v in m.items():
                            acc.setdefault(k, []).append(v)
                    self.global_step += 1
                    wcat = torch.cat(ws) if ws else torch.zeros(0)
                    metrics = {k: sum(v) / len(v) for k, v in acc.items()}
                    metrics.update(
                        round=r, epoch=epoch,
                        w_mean=float(wcat.mean()) if wcat.numel() else None,
                        w_std=float(wcat.std()) if wcat.numel() > 1 else None,
                        lr=float(self.engine.get_lr()[0]), baseline=self.baseline.value,
                    )
                    gn = self.engine.get_global_grad_norm() if hasattr(self.engine, "get_global_grad_norm") else None
                    if gn is not None:
                        metrics["grad_norm"] = float(gn)
                    self.last_metrics = metrics
                    if self.logger is not None:
                        self.logger.log({f"train/{k}": v for k, v in metrics.items()}, step=self.global_step)
                    bar.update(1)
                    bar.set_postfix(loss=f"{metrics['loss']:.4f}", acc=f"{metrics['accept_est']:.3f}",
                                    w=f"{metrics['w_mean']:.3f}" if metrics["w_mean"] is not None else "-")
                    if self.global_step % int(t.save_every) == 0:
                        self.save_checkpoint()
                    if stop_at is not None and self.global_step >= stop_at:
                        break
                if stop_at is not None and self.global_step >= stop_at:
                    break
            self.timings["train_s"] += time.perf_counter() - t0
            if stop_at is not None and self.global_step >= stop_at:
                if self.global_step % int(t.save_every) != 0:
                    self.save_checkpoint()
                break
            if self.global_step % int(t.save_every) != 0:  # round end: keep resumption at round granularity
                self.save_checkpoint()
        bar.close()
        finished = self.global_step >= self.total_steps
        if finished:
            self.save_checkpoint(final=True)
        return self.summary(finished)

    def _micro_step(self, data: pair_cache.RoundData, idx: list[int], ws: list[torch.Tensor]) -> dict[str, float]:
        t = self.t
        mb = data.batch(idx, self.device)
        w = self.engine(mb["h_q"], mb["h_p"])
        rewards = mb["reward"].float()
        batch_mean = all_mean(float(rewards.mean()), self.device)
        b = self.baseline.current(batch_mean)
        parts = diversed_loss(
            w, mb, rewards - b, mix=self.mix, reg_lambda=float(t.reg_lambda), reg_mode=str(t.reg_mode),
            normalize=str(t.normalize), max_new_tokens=int(t.max_new_tokens), importance_clip=float(t.importance_clip),
        )
        self.engine.backward(parts.loss)
        self.engine.step()
        self.baseline.update(batch_mean)
        self.timings["micro_steps"] += 1
        ws.append(w.detach().float().cpu())
        return {"loss": float(parts.loss.detach()), "pg_loss": float(parts.pg_loss), "reg": float(parts.reg),
                "reg_lambda": parts.reg_lambda, "accept_est": parts.accept_mean, "reward": float(rewards.mean()),
                "ratio_mean": float(parts.ratio.mean()), "tokens": float(parts.n_tokens)}

    # ------------------------------------------------------------------------------------------- checkpoints

    def latest_checkpoint(self) -> Path | None:
        root = self.out / "checkpoints"
        if not root.is_dir():
            return None
        latest = root / "latest"
        if latest.is_file():
            cand = root / latest.read_text().strip()
            if (cand / "trainer_state.json").is_file():
                return cand
        steps = []
        for d in root.glob("step_*"):
            if (d / "trainer_state.json").is_file() and d.name[5:].isdigit():
                steps.append((int(d.name[5:]), d))
        return max(steps)[1] if steps else None

    def save_checkpoint(self, final: bool = False) -> Path:
        """Write checkpoints/step_N atomically (temp dir + rename); with ``final`` also ``<output_dir>/head``."""
        from safetensors.torch import save_file

        root = self.out / "checkpoints"
        step = self.global_step
        tmp, dst = root / f".tmp_step_{step}", root / f"step_{step}"
        if self.dist.is_main:
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir(parents=True)
        barrier()
        self.engine.save_checkpoint(str(tmp), tag="deepspeed", client_state={"global_step": step}, save_latest=False)
        head = self.head_snapshot()
        if self.dist.is_main:
            head.save(tmp / "head")
            state = {
                "format": STATE_FORMAT, "global_step": step, "total_steps": self.total_steps,
                "round": step // self.steps_per_round if self.steps_per_round else 0,
                "steps_per_round": self.steps_per_round, "baseline": self.baseline.state_dict(),
                "mix": self.mix, "seed": self.seed, "world_size": self.dist.world_size,
                "last_metrics": self.last_metrics, "finished": final,
            }
            atomic_write_json(tmp / "trainer_state.json", state)
            save_file({"torch_cpu": torch.get_rng_state()}, str(tmp / "rng.safetensors"))
            if dst.exists():
                shutil.rmtree(dst)
            tmp.rename(dst)
            atomic_write_text(root / "latest", dst.name)
            keep = int(self.t.keep_checkpoints)
            old = sorted((int(d.name[5:]), d) for d in root.glob("step_*") if d.name[5:].isdigit())
            for _, d in old[:-keep]:
                shutil.rmtree(d, ignore_errors=True)
            if final:
                head.save(self.out / "head")
        barrier()
        return dst

    def _load_checkpoint(self, path: Path) -> None:
        from safetensors.torch import load_file

        state = json.loads((path / "trainer_state.json").read_text())
        if int(state.get("world_size", 1)) != self.dist.world_size:
            raise ValueError(f"checkpoint {path} was written with world_size={state.get('world_size')}, "
                             f"this run has {self.dist.world_size}")
        if state.get("steps_per_round") != self.steps_per_round:
            raise ValueError(f"checkpoint {path} has {state.get('steps_per_round')} steps per round, this config "
                             f"{self.steps_per_round}: resume with the same trainer settings")
        load_path, _ = self.engine.load_checkpoint(str(path), tag="deepspeed", load_optimizer_states=True,
                                                   load_lr_scheduler_states=True)
        if load_path is None:
            raise RuntimeError(f"DeepSpeed could not load the checkpoint in {path}")
        self.global_step = int(state["global_step"])
        self.baseline.load_state_dict(state["baseline"])
        self.last_metrics = state.get("last_metrics") or {}
        rng = path / "rng.safetensors"
        if rng.is_file():
            torch.set_rng_state(load_file(str(rng))["torch_cpu"])
        if self.dist.is_main:
            log.info("resumed from %s at step %d", path, self.global_step)

    # ------------------------------------------------------------------------------------------- summary

    def summary(self, finished: bool) -> dict[str, Any]:
        tm = dict(self.timings)
        out = {
            "finished": finished, "global_step": self.global_step, "total_steps": self.total_steps,
            "head": str(self.out / "head") if finished else None, "mix": self.mix,
            "final": self.last_metrics, "rounds": self.round_metrics,
            "timings": {
                **tm,
                "rollout_tokens_per_s": tm["new_tokens"] / tm["generate_s"] if tm["generate_s"] else None,
                "steps_per_s": self.global_step / tm["train_s"] if tm["train_s"] else None,
            },
            "deepspeed": self.ds_config,
        }
        if self.dist.is_main:
            atomic_write_json(self.out / "train_summary.json", {**out, "provenance": provenance()})
            if self.logger is not None:
                self.logger.summary({k: v for k, v in out.items() if k not in ("rounds", "deepspeed")})
        return out

    def cleanup(self) -> None:
        if self.logger is not None:
            self.logger.finish()
            self.logger = None
        if self.engine is not None and hasattr(self.engine, "destroy"):
            try:
                self.engine.destroy()
            except Exception:  # best effort: releasing hooks must not mask the run's result
                log.debug("engine.destroy failed", exc_info=True)
        self.engine = None


def run(cfg: DictConfig) -> dict[str, Any]:
    """Entry point of ``train.py``: set up, train, clean up; return the summary."""
    import sys

    trainer = DiversedTrainer(cfg)
    try:
        trainer.setup()
        if trainer.dist.is_main:
            atomic_write_text(trainer.out / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        result = trainer.train()
        if trainer.dist.is_main:
            tm = result["timings"]
            fin = result["final"] or {}
            print(f"trained {result['global_step']}/{result['total_steps']} steps -> {result['head']}", file=sys.stderr)
            print(f"  rollout {tm['rollout_tokens_per_s'] or 0:.1f} tok/s, {tm['steps_per_s'] or 0:.2f} steps/s, "
                  f"collect {tm['collect_s']:.0f}s, train {tm['train_s']:.1f}s; final accept_est "
                  f"{fin.get('accept_est', float('nan')):.3f}, w_mean {fin.get('w_mean') or float('nan'):.3f}",
                  file=sys.stderr)
        return result
    finally:
        trainer.cleanup()

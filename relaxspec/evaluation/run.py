"""The evaluation harness: several decoding methods on one benchmark, side by side, resumable.

For each batch of examples the methods run in a rotated order (so machine drift cancels), all in this
process on the same prompts; the AR baseline is just another method. Tokenisation and scoring stay
outside the timed region; every method gets untimed warm-up generations first.

Files in the run directory:
* ``config.yaml``  the resolved config;
* ``samples.jsonl`` one line per (example, method), appended atomically as soon as it is scored, so a run
  killed at any moment loses nothing already computed and a rerun into the same directory skips the
  finished (example, method) pairs;
* ``metrics.json`` ``{"methods": {name: {...}}, "quality": ..., "provenance": {...}}``, written atomically
  at the end from all records (so it is either absent or complete);
* ``log.jsonl`` the local metric log (W&B mirrors it when ``logger=wandb``).
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from relaxspec.config import ConfigError, load_method
from relaxspec.decoding.generate import StopChecker
from relaxspec.decoding.lm import CausalLM
from relaxspec.decoding.methods import Method, build_method
from relaxspec.decoding.sampling import SamplingParams
from relaxspec.evaluation.metrics import add_relative_metrics, method_metrics
from relaxspec.utils.io import append_jsonl, atomic_write_json, atomic_write_text, read_jsonl
from relaxspec.utils.logging import build_logger
from relaxspec.utils.provenance import provenance

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


def method_configs(cfg: DictConfig) -> list[DictConfig]:
    """The methods of this run: ``methods=[...]`` (names of conf/method files) or the single ``method``."""
    names = cfg.get("methods")
    if names is None:
        return [cfg.method]
    if isinstance(names, str):
        names = [names]
    return [cfg.method if n == cfg.method.name else load_method(n) for n in names]


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


def _sampling(cfg: DictConfig, temperature: float | None) -> SamplingParams:
    t = float(cfg.decode.temperature) if temperature is None else float(temperature)
    return SamplingParams(temperature=t, top_k=int(cfg.decode.top_k), top_p=float(cfg.decode.top_p))


def _max_new_tokens(cfg: DictConfig) -> int:
    if cfg.decode.max_new_tokens is not None:
        return int(cfg.decode.max_new_tokens)
    return int(cfg.dataset.get("max_new_tokens") or 128)


class Harness:
    """Runs methods over examples and writes the run directory."""

    def __init__(self, cfg: DictConfig, out_dir: Path):
        from relaxspec.models.pairs import load_pair
        from relaxspec.tasks import build_task

        self.cfg = cfg
        self.out = out_dir
        self.task = build_task(cfg.dataset)
        self.examples = self.task.examples(split=cfg.dataset.get("split"), limit=cfg.dataset.get("limit"),
                                           seed=cfg.dataset.get("seed"))
        if not self.examples:
            raise ConfigError(f"dataset '{cfg.dataset.name}' has no examples (split={cfg.dataset.get('split')})")
        self.method_cfgs = method_configs(cfg)
        self.max_new = _max_new_tokens(cfg)
        self.samples_path = out_dir / "samples.jsonl"
        self.done = {(r["id"], r["method"]) for r in read_jsonl(self.samples_path)}
        self.pair = load_pair(cfg.pair)
        lms = {"target": CausalLM(self.pair.target), "draft": CausalLM(self.pair.draft)}
        k = int(cfg.decode.draft_length)
        self.methods: list[Method] = [build_method(m, self.pair, draft_length=k, lms=lms) for m in self.method_cfgs]
        self.stopper = StopChecker(self.pair.eos_ids, list(getattr(self.task, "stop", []) or []), self.pair.tokenizer)
        self._check_context()

    def prompt_ids(self, example: dict[str, Any], previous: list[str]) -> list[int]:
        if getattr(self.task, "chat", True):
            return self.pair.render(self.task.messages(example, previous))
        return self.pair.render(self.task.raw_prompt(example))

    def _check_context(self) -> None:
        """Refuse, before any generation, prompts that cannot fit the target's context window."""
        limit = self.pair.context_length
        extra = self.max_new + int(self.cfg.decode.draft_length) + 2
        for ex in self.examples:
            n = len(self.prompt_ids(ex, [""] * (self.task.num_turns(ex) - 1)))
            if n + extra * self.task.num_turns(ex) > limit:
                raise ConfigError(
                    f"example {ex['id']}: prompt of {n} tokens + {extra} generated exceeds the context length {limit}"
                )

    def _generate(self, method: Method, batch: list[dict[str, Any]], seed: int) -> tuple[list[dict], float, dict]:
        """All turns of ``batch`` with ``method``; returns per-example turn outputs, wall time, time split."""
        gen = torch.Generator(device=self.pair.target.device).manual_seed(seed)
        answers: list[list[str]] = [[] for _ in batch]
        turns: list[list[dict[str, Any]]] = [[] for _ in batch]
        wall, split = 0.0, {"prefill": 0.0, "draft": 0.0, "verify": 0.0, "other": 0.0}
        n_turns = max(self.task.num_turns(ex) for ex in batch)
        for t in range(n_turns):
            active = [i for i, ex in enumerate(batch) if self.task.num_turns(ex) > t]
            groups: dict[float | None, list[int]] = {}
            for i in active:
                groups.setdefault(self.task.temperature(batch[i]), []).append(i)
            for temp, idx in groups.items():
                prompts = [self.prompt_ids(batch[i], answers[i]) for i in idx]
                params = _sampling(self.cfg, temp)
                _sync()
                t0 = time.perf_counter()
                outs, timing = method.generate(prompts, params=params, max_new_tokens=[self.max_new] * len(idx),
                                               stopper=self.stopper, generator=gen)
                _sync()
                dt = time.perf_counter() - t0
                wall += dt
                for key in split:
                    split[key] += getattr(timing, key)
                for i, o, pr in zip(idx, outs, prompts, strict=True):
                    text = self.pair.tokenizer.decode(o.tokens, skip_special_tokens=True)
                    text = _cut_stop(text, getattr(self.task, "stop", []) or [])
                    answers[i].append(text)
                    turns[i].append({"prompt_tokens": len(pr), "completion": text, "tokens": o.tokens,
                                     "finish_reason": o.finish_reason, "stats": vars(o.stats),
                                     "temperature": params.temperature, "wall_time_s": dt * len(o.tokens) /
                                     max(1, sum(len(x.tokens) for x in outs))})
        return turns, wall, split

    def warmup(self, n: int) -> None:
        if n <= 0:
            return
        ex = self.examples[:1]
        for m in self.methods:
            for _ in range(n):
                self._generate(m, ex, seed=0)

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        bs = int(cfg.decode.batch_size)
        batches = [self.examples[i : i + bs] for i in range(0, len(self.examples), bs)]
        todo = sum(1 for ex in self.examples for m in self.methods if (ex["id"], m.name) not in self.done)
        log.info("%d examples x %d methods, %d pairs to run (%d already done)", len(self.examples),
                 len(self.methods), todo, len(self.done))
        logger = build_logger(cfg.logger, self.out, cfg)
        try:
            if todo:
                self.warmup(int(cfg.get("warmup", 1)))
            from tqdm.auto import tqdm

            bar = tqdm(total=todo, desc="examples x methods", disable=todo == 0)
            for b, batch in enumerate(batches):
                order = self.methods[b % len(self.methods):] + self.methods[: b % len(self.methods)]
                for method in order:
                    pending = [ex for ex in batch if (ex["id"], method.name) not in self.done]
                    if not pending:
                        continue
                    seed = int(cfg.seed) * 1_000_003 + b
                    turns, wall, split = self._generate(method, pending, seed)
                    for ex, ex_turns in zip(pending, turns, strict=True):
                        rec = self._record(ex, method, ex_turns, wall, split, len(pending), b)
                        append_jsonl(self.samples_path, rec)
                        self.done.add((ex["id"], method.name))
                        logger.log({"method": method.name, "id": ex["id"], "new_tokens": rec["stats"]["new_tokens"],
                                    "wall_time_s": rec["wall_time_s"]})
                        bar.update(1)
            bar.close()
            metrics = self.finalize()
            logger.summary({name: {k: v for k, v in m.items() if not isinstance(v, list | dict)}
                            for name, m in metrics["methods"].items()})
            logger.table("samples", [_flat_record(r) for r in read_jsonl(self.samples_path)])
            logger.artifact("results", [self.out / "metrics.json", self.samples_path, self.out / "config.yaml"])
        finally:
            logger.finish()
        return metrics

    def _record(self, ex, method, turns, wall, split, n_batch, batch_idx) -> dict[str, Any]:
        stats: dict[str, Any] = {}
        for t in turns:
            for key, v in t["stats"].items():
                if isinstance(v, list):
                    cur = stats.setdefault(key, [0] * len(v))
                    stats[key] = [a + b for a, b in zip(cur, v, strict=True)]
                else:
                    stats[key] = stats.get(key, 0) + v
        completions = [t["completion"] for t in turns]
        scores = self.task.score(ex, completions)
        share = sum(t["wall_time_s"] for t in turns)
        frac = share / wall if wall > 0 else 1.0 / n_batch
        return {
            "id": ex["id"],
            "method": method.name,
            "batch": batch_idx,
            "batch_size": n_batch,
            "completion": completions[-1],
            "turns": [{k: v for k, v in t.items() if k != "stats"} for t in turns],
            "scores": scores,
            "stats": stats,
            "wall_time_s": share,
            "time_split": {k: v * frac for k, v in split.items()},
        }

    def finalize(self) -> dict[str, Any]:
        records = [r for r in read_jsonl(self.samples_path) if r["method"] in {m.name for m in self.methods}]
        ids = {ex["id"] for ex in self.examples}
        records = [r for r in records if r["id"] in ids]
        per_method: dict[str, dict[str, Any]] = {}
        for m in self.methods:
            recs = [r for r in records if r["method"] == m.name]
            if not recs:
                continue
            mm = method_metrics(recs)
            mm["quality"] = self.task.aggregate([r["scores"] for r in recs])
            per_method[m.name] = mm
        add_relative_metrics(per_method, records)
        metrics = {
            "schema_version": SCHEMA_VERSION,
            "task": {"name": self.cfg.dataset.name, "version": self.cfg.dataset.get("version"),
                     "split": self.cfg.dataset.get("split"), "n_examples": len(self.examples)},
            "methods": per_method,
            "provenance": provenance(
                seed=int(self.cfg.seed),
                pair=self.pair.info,
                dataset={"name": self.cfg.dataset.name, "version": self.cfg.dataset.get("version")},
                decode=OmegaConf.to_container(self.cfg.decode, resolve=True),
                timing={"warmup": int(self.cfg.get("warmup", 1)), "interleaved": True,
                        "batch_size": int(self.cfg.decode.batch_size)},
            ),
        }
        atomic_write_json(self.out / "metrics.json", metrics)
        return metrics


def _cut_stop(text: str, stops: list[str]) -> str:
    cut = len(text)
    for s in stops:
        if s and s in text:
            cut = min(cut, text.index(s))
    return text[:cut]


def _flat_record(r: dict[str, Any]) -> dict[str, Any]:
    out = {"id": r["id"], "method": r["method"], "completion": r["completion"], "wall_time_s": r["wall_time_s"]}
    out.update({f"score/{k}": v for k, v in r["scores"].items() if isinstance(v, int | float | bool)})
    out.update({f"stats/{k}": v for k, v in r["stats"].items() if isinstance(v, int | float)})
    return out


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def summary_lines(metrics: dict[str, Any]) -> list[str]:
    """Human-readable one line per method."""
    lines = []
    for name, m in metrics["methods"].items():
        q = m.get("quality", {})
        qual = ", ".join(f"{k}={v:.3f}" for k, v in q.items()
                         if isinstance(v, float) and not k.endswith(("_ci_low", "_ci_high")))
        acc = m.get("acceptance_rate")
        parts = [f"{name:>16}: tokens={m['new_tokens']}",
                 f"tok/s={m['tokens_per_second']:.2f}" if m.get("tokens_per_second") else "tok/s=n/a",
                 f"tau={m['mean_accepted_length']:.2f}" if m.get("mean_accepted_length") else "",
                 f"accept={acc:.3f}" if acc is not None else "",
                 f"speedup={m['speedup_vs_ar']:.2f}x" if m.get("speedup_vs_ar") else "",
                 qual]
        lines.append("  ".join(p for p in parts if p))
    return lines


def run(cfg: DictConfig) -> dict[str, Any]:
    """Entry point of ``evaluate.py``: returns metrics.json's content."""
    torch.set_num_threads(max(1, torch.get_num_threads()))
    _seed_everything(int(cfg.seed))
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    harness = Harness(cfg, out)
    metrics = harness.run()
    for line in summary_lines(metrics):
        print(line)
    first = harness.examples[0]
    for r in read_jsonl(harness.samples_path):
        if r["id"] == first["id"]:
            print(f"[{r['method']}] {first['id']}: {r['completion'][:300]!r}")
    print(f"results: {out}")
    return metrics

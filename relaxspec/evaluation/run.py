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

Scoring runs after each (batch, method) generation with ``task.score_many`` (HumanEval runs its programs
in parallel there), never inside the timed region. Several ``run(cfg)`` calls in one process (a Hydra
multirun, the demo) reuse the loaded pair when its config is unchanged.

Data-parallel (``torchrun --nproc_per_node N evaluate.py ...``, see `relaxspec.distributed`): example ``i``
goes to rank ``i % N``; each rank appends its records to ``samples.rank<r>.jsonl`` (same atomic appends);
rank 0 waits at a barrier, folds every ``samples.rank*.jsonl`` into ``samples.jsonl`` (first record of each
(example, method) wins; the rank files are then removed) and writes ``metrics.json``. Only rank 0 logs (W&B).
The generator of a batch is seeded from its *global* index, so at batch size 1 the outputs are the same for
any N, sampled or greedy. Resume works across any N: every rank skips the pairs found in ``samples.jsonl``
and in any rank file. Pass ``hydra.run.dir=...`` under torchrun (rank 0's directory is broadcast anyway).

Failed jobs: when ``run(cfg)`` raises, ``FAILED`` and ``error.txt`` are written into the run directory
(`relaxspec.distributed.mark_failed`); in a Hydra multirun the job then returns ``{"failed": ...}`` so the
other jobs of the sweep keep running, and ``python -m relaxspec.report`` lists it. A single run re-raises.

Knobs read with defaults (add them to conf/evaluate.yaml to override without ``++``): ``warmup`` (untimed
warm-up generations per method), ``warmup_tokens`` (their length; null = max_new_tokens), ``train_task``
(tags a run with the task its DIVERSED head was trained on; default: read from the head, see
`head_info`).
"""

from __future__ import annotations

import datetime
import inspect
import json
import logging
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from relaxspec import distributed as dist
from relaxspec.config import ConfigError, load_method
from relaxspec.decoding.generate import StopChecker
from relaxspec.decoding.lm import CausalLM
from relaxspec.decoding.methods import Method, build_method
from relaxspec.decoding.sampling import SamplingParams
from relaxspec.evaluation.metrics import METRIC_DEFINITIONS, add_relative_metrics, method_metrics
from relaxspec.utils.io import append_jsonl, atomic_write_json, atomic_write_text, read_jsonl
from relaxspec.utils.logging import build_logger
from relaxspec.utils.provenance import provenance

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


def method_configs(cfg: DictConfig) -> list[DictConfig]:
    """The methods of this run: ``methods=[...]`` (names of conf/method files) or the single ``method``.

    With ``static_w_drafts=[w1, w2, ...]`` (read with a default of null) every static-ensemble method is
    expanded into one method per draft weight, named ``<name>@<w>``, so a whole static-weight Pareto curve
    runs in one process next to AR, SD and DIVERSED (same prompts, interleaved, one AR timing).
    """
    names = cfg.get("methods")
    if names is None:
        methods = [cfg.method]
    else:
        if isinstance(names, str):
            names = [names]
        methods = [cfg.method if n == cfg.method.name else load_method(n) for n in names]
    weights = cfg.get("static_w_drafts")
    if not weights:
        return methods
    out = []
    for m in methods:
        if m.get("rule") != "static_ensemble":
            out.append(m)
            continue
        for w in weights:
            if not 0.0 <= float(w) <= 1.0:
                raise ConfigError(f"static_w_drafts must be in [0, 1], got {w}")
            mw = OmegaConf.create(OmegaConf.to_container(m, resolve=True))
            mw.w_draft, mw.name = float(w), f"{m.name}@{float(w):g}"
            out.append(mw)
    return out


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


_PAIR_CACHE: dict[str, Any] = {}


def _cached_pair(pair_cfg: DictConfig, load: Any) -> Any:
    """The loaded pair for ``pair_cfg``; one pair is kept per process (multirun jobs, the demo)."""
    key = OmegaConf.to_yaml(pair_cfg, resolve=True)
    if key not in _PAIR_CACHE:
        _PAIR_CACHE.clear()  # free the previous pair before loading another
        _PAIR_CACHE[key] = load(pair_cfg)
    return _PAIR_CACHE[key]


def head_info(method_cfg: Any, head: Any) -> dict[str, Any]:
    """Where a DIVERSED head comes from and the task it was trained on.

    The task is, in order: the head's ``head.json`` meta (``task``, ``train_task`` or ``dataset``), then the
    training run's config next to the head (``<head>/../config.yaml`` or ``.hydra/config.yaml``:
    ``dataset.name``). An explicit ``train_task=...`` in the evaluation config overrides both.
    """
    meta = dict(getattr(head, "meta", {}) or {})
    path = method_cfg.get("head")
    task = meta.get("task") or meta.get("train_task") or meta.get("dataset")
    if isinstance(task, dict):
        task = task.get("name")
    if task is None and path:
        for cand in (Path(path).parent / "config.yaml", Path(path).parent / ".hydra" / "config.yaml"):
            if cand.is_file():
                try:
                    task = (OmegaConf.load(cand).get("dataset") or {}).get("name")
                except Exception:  # an unreadable training config only loses the tag
                    task = None
                if task:
                    break
    return {"path": str(path) if path else None, "trained": bool(path) and meta.get("trained", True) is not False,
            "task": task, "steps": meta.get("steps"), "mix": meta.get("mix")}


def _logger_cfg(cfg: DictConfig, method_names: list[str]) -> DictConfig:
    """The logger config with default W&B tags (dataset, methods) and group (the sweep's config name)."""
    lc = OmegaConf.create(OmegaConf.to_container(cfg.logger, resolve=True))
    if not lc.get("tags"):
        lc.tags = [str(cfg.dataset.name), *method_names]
    if lc.get("group") is None:
        try:
            from hydra.core.hydra_config import HydraConfig

            hc = HydraConfig.get()
            if str(hc.mode) == "RunMode.MULTIRUN":
                lc.group = hc.job.config_name
        except (ImportError, ValueError):
            pass
    return lc


def summary_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """Aggregates as ``{dataset/method/metric: number}`` (quality under ``dataset/method/quality/...``)."""
    ds = metrics["task"]["name"]
    out: dict[str, Any] = {}
    for name, m in metrics["methods"].items():
        for k, v in m.items():
            if isinstance(v, bool) or v is None or isinstance(v, int | float):
                out[f"{ds}/{name}/{k}"] = v
            elif k == "quality":
                out.update({f"{ds}/{name}/quality/{qk}": qv for qk, qv in v.items() if isinstance(qv, int | float)})
            elif k == "accept_at_position":
                out.update({f"{ds}/{name}/accept_at_position/{j + 1}": a for j, a in enumerate(v)})
    return out


class Harness:
    """Runs methods over examples and writes the run directory."""

    def __init__(self, cfg: DictConfig, out_dir: Path):
        from relaxspec.models.pairs import load_pair
        from relaxspec.tasks import build_task

        self.cfg = cfg
        self.out = out_dir
        self.task = build_task(cfg.dataset)
        self.all_examples = self.task.examples(split=cfg.dataset.get("split"), limit=cfg.dataset.get("limit"),
                                               seed=cfg.dataset.get("seed"))
        if not self.all_examples:
            raise ConfigError(f"dataset '{cfg.dataset.name}' has no examples (split={cfg.dataset.get('split')})")
        self.rank, self.world = dist.rank(), dist.world_size()
        self.index = {ex["id"]: i for i, ex in enumerate(self.all_examples)}
        self.examples = dist.shard(self.all_examples, self.rank, self.world)  # example i -> rank i % world
        self.method_cfgs = method_configs(cfg)
        self.max_new = _max_new_tokens(cfg)
        self.merged_path = out_dir / "samples.jsonl"
        self.samples_path = self.merged_path if self.world == 1 else out_dir / f"samples.rank{self.rank}.jsonl"
        if self.world == 1:
            self.merge_rank_files()  # left over by an interrupted data-parallel run
        self.done = {(r["id"], r["method"]) for p in [self.merged_path, *self.rank_files()] for r in read_jsonl(p)}
        self.pair = _cached_pair(cfg.pair, load_pair)
        lms = {"target": CausalLM(self.pair.target), "draft": CausalLM(self.pair.draft)}
        k = int(cfg.decode.draft_length)
        extra: dict[str, Any] = {}  # the draft-policy group (conf/draft), when build_method knows it
        params = inspect.signature(build_method).parameters
        if "draft_cfg" in params and cfg.get("draft") is not None:
            extra["draft_cfg"] = cfg.draft
        if "batch_size" in params:
            extra["batch_size"] = int(cfg.decode.batch_size)
        self.methods: list[Method] = [build_method(m, self.pair, draft_length=k, lms=lms, **extra)
                                      for m in self.method_cfgs]
        self.stopper = StopChecker(self.pair.eos_ids, list(getattr(self.task, "stop", []) or []), self.pair.tokenizer)
        self._check_context()

    def prompt_ids(self, example: dict[str, Any], previous: list[str]) -> list[int]:
        if getattr(self.task, "chat", True):
            return self.pair.render(self.task.messages(example, previous))
        return self.pair.render(self.task.raw_prompt(example))

    def _check_context(self) -> None:
        """Refuse, before any generation, prompts that cannot fit the target's context window."""
        limit = self.pair.context_length
        k_max = max([int(self.cfg.decode.draft_length)] + [int(getattr(m, "max_draft_len", 0)) for m in self.methods])
        extra = self.max_new + k_max + 2
        for ex in self.all_examples:  # every rank checks all examples, so all fail (or pass) together
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

    def warmup(self, n: int, tokens: int | None = None) -> None:
        """``n`` untimed generations per method on the first example (``tokens`` new tokens each)."""
        if n <= 0 or not self.examples:
            return
        ex = self.examples[:1]
        saved = self.max_new
        self.max_new = min(saved, int(tokens)) if tokens else saved
        try:
            for m in self.methods:
                for _ in range(n):
                    self._generate(m, ex, seed=0)
        finally:
            self.max_new = saved

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        bs = int(cfg.decode.batch_size)
        batches = [self.examples[i : i + bs] for i in range(0, len(self.examples), bs)]
        todo = sum(1 for ex in self.examples for m in self.methods if (ex["id"], m.name) not in self.done)
        log.info("%d examples x %d methods, %d pairs to run (%d already done)", len(self.examples),
                 len(self.methods), todo, len(self.done))
        logger = build_logger(_logger_cfg(cfg, [m.name for m in self.methods]), self.out, cfg, rank=self.rank)
        try:
            if todo:
                t0 = time.perf_counter()
                self.warmup(int(cfg.get("warmup", 1)), cfg.get("warmup_tokens"))
                log.info("warm-up: %.1f s", time.perf_counter() - t0)
            from tqdm.auto import tqdm

            n_todo_ex = sum(1 for ex in self.examples if any((ex["id"], m.name) not in self.done
                                                                 for m in self.methods))
            ex_bar = tqdm(total=n_todo_ex, desc="examples" if self.world == 1 else f"examples (rank {self.rank})",
                          unit="ex", disable=todo == 0, position=0)
            for b_local, batch in enumerate(batches):
                # the global batch index (seeds, method rotation): at batch size 1 the same for any world size
                b = b_local if self.world == 1 else self.index[batch[0]["id"]] // bs
                order = self.methods[b % len(self.methods):] + self.methods[: b % len(self.methods)]
                todo_b = [m for m in order if any((ex["id"], m.name) not in self.done for ex in batch)]
                if not todo_b:
                    continue
                m_bar = tqdm(todo_b, desc=f"methods (batch {b})", unit="method", leave=False, position=1)
                for method in m_bar:
                    m_bar.set_postfix_str(method.name)
                    pending = [ex for ex in batch if (ex["id"], method.name) not in self.done]
                    seed = int(cfg.seed) * 1_000_003 + b
                    turns, wall, split = self._generate(method, pending, seed)  # the only timed part
                    scores = self.task.score_many(pending, [[t["completion"] for t in ts] for ts in turns])
                    for ex, ex_turns, sc in zip(pending, turns, scores, strict=True):
                        rec = self._record(ex, method, ex_turns, sc, wall, split, len(pending), b)
                        append_jsonl(self.samples_path, rec)
                        self.done.add((ex["id"], method.name))
                        logger.log({"method": method.name, "id": ex["id"], "new_tokens": rec["stats"]["new_tokens"],
                                    "wall_time_s": rec["wall_time_s"]})
                m_bar.close()
                ex_bar.update(sum(1 for ex in batch if any((ex["id"], m.name) in self.done for m in todo_b)))
            ex_bar.close()
            if self.world > 1:
                dist.barrier()  # every rank's records are on disk
                if self.rank != 0:
                    return {}
                self.merge_rank_files()
            self.add_fidelity()
            metrics = self.finalize()
            logger.summary(summary_metrics(metrics))
            logger.table("samples", [_flat_record(r) for r in read_jsonl(self.merged_path)])
            logger.artifact("results", [self.out / "metrics.json", self.merged_path, self.out / "config.yaml"])
        finally:
            logger.finish()
        return metrics

    def reference_method(self) -> str | None:
        """Name of the target's own autoregressive method in this run (``rule: null``, e.g. ``ar``), if any."""
        return next((str(m.name) for m in self.method_cfgs if m.get("rule") is None), None)

    def add_fidelity(self) -> None:
        """Fidelity of every record to the target (``dataset.fidelity: true``; METHODS-VARIANTS §9.4).

        Computed after generation and kept apart from it (nothing here is timed), on rank 0, into each
        record's ``scores``:

        * ``target_nll_turn<t>`` / ``target_nll``: the target's mean per-token NLL (nats) of the method's own
          answer given that turn's prompt (turn 2's prompt holds the method's own first answer), teacher-forced;
          ``target_nll`` is token-weighted over the turns;
        * ``rouge_l_turn<t>`` / ``rouge_l``: ROUGE-L F of the answer against the target's own autoregressive
          answer to the same example in this run (the method with ``rule: null``, i.e. ``ar``; mean over turns).
          Not given for the AR method itself, nor when the run has no AR method (a warning says so).

        Records that already have ``target_nll`` are kept as they are (a resumed run does not recompute), and
        ``samples.jsonl`` is rewritten atomically after every example, so a kill loses at most one example.
        """
        if not self.cfg.dataset.get("fidelity"):
            return
        from relaxspec.tasks.fidelity import rouge_l, target_nll

        records = read_jsonl(self.merged_path)
        ref = self.reference_method()
        if ref is None:
            log.warning("fidelity: no autoregressive method (rule: null) in this run, so no ROUGE-L against the "
                        "target's own answer (add ar to methods=[...]); target NLL only")
        by_key = {(r.get("id"), r.get("method")): r for r in records}
        todo: dict[str, list[dict[str, Any]]] = {}  # example id -> its records without fidelity yet
        for r in records:
            if r.get("id") in self.index and "target_nll" not in r.get("scores", {}):
                todo.setdefault(r["id"], []).append(r)
        if not todo:
            return
        examples = {ex["id"]: ex for ex in self.all_examples}
        t0 = time.perf_counter()
        from tqdm.auto import tqdm

        for ex_id, ex_records in tqdm(todo.items(), desc="fidelity", unit="ex"):
            ex = examples[ex_id]
            ref_rec = by_key.get((ex_id, ref)) if ref is not None else None
            for r in ex_records:
                completions = [t["completion"] for t in r["turns"]]
                extra: dict[str, float] = {}
                nll_sum, n_tok = 0.0, 0
                for t, turn in enumerate(r["turns"]):
                    prompt = self.prompt_ids(ex, completions[:t])
                    nll = target_nll(self.pair.target, prompt, turn["tokens"])
                    extra[f"target_nll_turn{t + 1}"] = nll
                    if turn["tokens"]:
                        nll_sum, n_tok = nll_sum + nll * len(turn["tokens"]), n_tok + len(turn["tokens"])
                extra["target_nll"] = nll_sum / n_tok if n_tok else float("nan")
                if ref_rec is not None and r["method"] != ref:
                    ref_turns = [t["completion"] for t in ref_rec["turns"]]
                    rl = [rouge_l(c, c_ref) for c, c_ref in zip(completions, ref_turns, strict=False)]
                    extra.update({f"rouge_l_turn{t + 1}": v for t, v in enumerate(rl)})
                    extra["rouge_l"] = sum(rl) / len(rl) if rl else float("nan")
                r["scores"] = {**r.get("scores", {}), **extra}
            atomic_write_text(self.merged_path, "".join(json.dumps(x, default=str, ensure_ascii=False) + "\n"
                                                        for x in records))
        log.info("fidelity of %d records: %.1f s", sum(map(len, todo.values())), time.perf_counter() - t0)

    def rank_files(self) -> list[Path]:
        return sorted(self.out.glob("samples.rank*.jsonl"))

    def merge_rank_files(self) -> None:
        """Fold every ``samples.rank*.jsonl`` into ``samples.jsonl`` (atomically), then remove them.

        Records already in samples.jsonl keep their place; new ones follow in global example order and
        method order. The first record of each (example, method) wins, so a crash between the rewrite and
        the removal only leaves duplicates that the next merge drops.
        """
        files = self.rank_files()
        if not files:
            return
        merged = read_jsonl(self.merged_path)
        seen = {(r.get("id"), r.get("method")) for r in merged}
        order = {m.name: j for j, m in enumerate(self.method_cfgs)}
        new = []
        for p in files:
            for r in read_jsonl(p):
                key = (r.get("id"), r.get("method"))
                if key not in seen:
                    seen.add(key)
                    new.append(r)
        new.sort(key=lambda r: (self.index.get(r.get("id"), len(self.index)), order.get(r.get("method"), len(order))))
        atomic_write_text(self.merged_path, "".join(json.dumps(r, default=str, ensure_ascii=False) + "\n"
                                                    for r in merged + new))
        for p in files:
            p.unlink(missing_ok=True)
        log.info("merged %d records from %d rank file(s) into %s", len(new), len(files), self.merged_path)

    def _record(self, ex, method, turns, scores, wall, split, n_batch, batch_idx) -> dict[str, Any]:
        stats: dict[str, Any] = {}
        for t in turns:
            for key, v in t["stats"].items():
                if isinstance(v, list):
                    cur = stats.setdefault(key, [0] * len(v))
                    stats[key] = [a + b for a, b in zip(cur, v, strict=True)]
                else:
                    stats[key] = stats.get(key, 0) + v
        completions = [t["completion"] for t in turns]
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
        names = {m.name for m in self.methods}
        ids = {ex["id"] for ex in self.all_examples}
        records, seen = [], set()
        for r in read_jsonl(self.merged_path):  # first record of each (example, method) wins
            key = (r.get("id"), r.get("method"))
            if key[0] in ids and key[1] in names and key not in seen:
                seen.add(key)
                records.append(r)
        per_method: dict[str, dict[str, Any]] = {}
        for m, mcfg in zip(self.methods, self.method_cfgs, strict=True):
            recs = [r for r in records if r["method"] == m.name]
            if not recs:
                continue
            mm = method_metrics(recs)
            mm["quality"] = self.task.aggregate([r["scores"] for r in recs])
            mm["method_config"] = OmegaConf.to_container(mcfg, resolve=True)
            if m.head is not None:
                mm["head"] = head_info(mcfg, m.head)
            mm["train_task"] = (self.cfg.get("train_task") or mm["head"]["task"]) if m.head is not None else None
            per_method[m.name] = mm
        add_relative_metrics(per_method, records)
        missing = [f"{ex['id']}/{m.name}" for ex in self.all_examples for m in self.methods
                   if (ex["id"], m.name) not in seen]
        metrics = {
            "schema_version": SCHEMA_VERSION,
            "complete": not missing,
            "missing": missing,
            "task": {"name": self.cfg.dataset.name, "version": self.cfg.dataset.get("version"),
                     "split": self.cfg.dataset.get("split"), "limit": self.cfg.dataset.get("limit"),
                     "n_examples": len(self.all_examples),
                     "primary_metric": getattr(self.task, "primary_metric", None)},
            "baseline": "ar",
            # speed numbers are only comparable at batch size 1 (Lesson 10); batched runs are quality runs
            "timing": int(self.cfg.decode.batch_size) == 1,
            "definitions": METRIC_DEFINITIONS,
            "methods": per_method,
            "provenance": provenance(
                seeds={"seed": int(self.cfg.seed), "dataset_shuffle": self.cfg.dataset.get("seed"),
                       "pair_init": self.cfg.pair.get("seed"),
                       "generator": "seed * 1000003 + batch_index (torch.Generator, shared by all methods)"},
                pair=self.pair.info,
                dataset={"name": self.cfg.dataset.name, "version": self.cfg.dataset.get("version"),
                         "split": self.cfg.dataset.get("split"), "path": self.cfg.dataset.get("path"),
                         "data_dir": self.cfg.get("paths", {}).get("data_dir")},
                decode=OmegaConf.to_container(self.cfg.decode, resolve=True),
                draft=OmegaConf.to_container(self.cfg.draft, resolve=True) if self.cfg.get("draft") else None,
                max_new_tokens=self.max_new,
                timing={"warmup": int(self.cfg.get("warmup", 1)), "warmup_tokens": self.cfg.get("warmup_tokens"),
                        "interleaved": True, "batch_size": int(self.cfg.decode.batch_size),
                        "world_size": self.world,
                        "clock": "time.perf_counter, cuda-synchronized; tokenisation, detokenisation and "
                                 "scoring outside the timed region"},
                command=list(sys.argv),
                time_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
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


RESUME_KEYS = ("pair", "dataset", "decode", "draft", "seed")


def check_resume_config(out: Path, cfg: DictConfig) -> None:
    """Refuse to resume into a run dir whose samples came from a different pair/dataset/decode/seed.

    Adding methods to an existing run dir is allowed (their pairs simply run); changing what the existing
    samples mean is not.
    """
    old_path = out / "config.yaml"
    if not (out / "samples.jsonl").is_file() or not old_path.is_file():
        return
    old = OmegaConf.to_container(OmegaConf.load(old_path), resolve=False)
    new = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(old, dict) and isinstance(new, dict)
    for key in RESUME_KEYS:
        if key in old and key in new and old[key] != new[key]:
            raise ConfigError(f"{out} holds samples of a different '{key}' config; use a new output dir "
                              f"(was {json.dumps(old[key], default=str)[:200]})")


def _multirun() -> bool:
    try:
        from hydra.core.hydra_config import HydraConfig

        return str(HydraConfig.get().mode) == "RunMode.MULTIRUN"
    except (ImportError, ValueError):
        return False


def run(cfg: DictConfig) -> dict[str, Any]:
    """Entry point of ``evaluate.py``: returns metrics.json's content ({} on ranks > 0).

    On failure writes ``FAILED`` + ``error.txt`` into the run dir; in a Hydra multirun the job then returns
    ``{"failed": True, "error": ..., "output_dir": ...}`` instead of raising, so the sweep goes on.
    """
    out = Path(cfg.output_dir)
    try:
        dist.init_process_group()
        out = Path(dist.broadcast_object(str(out)))  # every rank writes where rank 0 does
        metrics = _run(cfg, out)
    except Exception as exc:
        if dist.is_main():
            dist.mark_failed(out, exc)
        if not _multirun():
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"error: job failed ({out}): {type(exc).__name__}: {first}", file=sys.stderr)
        log.error("job failed (%s)", out, exc_info=exc)
        return {"failed": True, "error": f"{type(exc).__name__}: {first}", "output_dir": str(out)}
    if dist.is_main():
        dist.clear_failed(out)
    return metrics


def _run(cfg: DictConfig, out: Path) -> dict[str, Any]:
    torch.set_num_threads(max(1, torch.get_num_threads()))
    _seed_everything(int(cfg.seed))
    out.mkdir(parents=True, exist_ok=True)
    check_resume_config(out, cfg)
    if dist.is_main():
        atomic_write_text(out / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    harness = Harness(cfg, out)
    metrics = harness.run()
    if not dist.is_main():
        return metrics
    for line in summary_lines(metrics):
        print(line)
    first = harness.all_examples[0]
    for r in read_jsonl(harness.merged_path):
        if r["id"] == first["id"]:
            print(f"[{r['method']}] {first['id']}: {r['completion'][:300]!r}")
    print(f"results: {out}")
    return metrics

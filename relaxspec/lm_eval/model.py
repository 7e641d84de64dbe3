"""`RelaxSpecLM`: relaxspec's decoding methods as an lm-evaluation-harness model named ``relaxspec``.

    lm_eval --model relaxspec --model_args pair=qwen25_coder,method=diversed,head=<dir> \\
        --tasks relaxspec_gsm8k --include_path lm_eval_tasks --limit 10

``generate_until`` runs the chosen decoding method (relaxspec's own draft -> verify loop, exactly as
``evaluate.py`` does: same `build_method`, same stop handling); ``loglikelihood`` and
``loglikelihood_rolling`` are answered by the TARGET model alone (one full forward per request).

model_args (all optional):

* ``pair`` (conf/pair name, default qwen25_coder), ``method`` (conf/method name, default sd), ``head`` (a
  DIVERSED head dir = ``method.head``), ``draft`` (conf/draft name, default constant);
* ``temperature``, ``top_k``, ``top_p``: when given they override every task's generation kwargs; when not,
  a task's ``do_sample: false`` means greedy and ``temperature``/``top_k``/``top_p`` come from its kwargs;
* ``draft_length`` (k), ``max_gen_toks`` (when given it overrides the tasks' ``max_gen_toks``; when not, a
  task's value is used, else 256),
  ``batch_size`` (rows per generate / scoring call; ``--batch_size`` is used when this is absent),
  ``max_length`` (context for loglikelihood; default the target's), ``seed`` (default 0);
* ``chat`` (bool, default false): render each generate_until context as one user message with the pair's
  chat template (lm-eval's own ``--apply_chat_template`` also works, through `apply_chat_template`);
* ``stats_path``: also write the acceptance report as JSON to this file;
* any dotted key is a Hydra override of the relaxspec config, e.g. ``pair.target.path=/models/x``,
  ``method.w_draft=0.3``, ``decode.draft_length=8``; ``device=cuda`` sets ``pair.device``.

Acceptance and tau: after the run, `get_model_info` (lm-eval merges it into ``results["config"]``, hence into
the ``results_*.json`` under ``--output_path``) returns ``{"relaxspec": {...}}`` with, overall and per task,
acceptance_rate, mean_accepted_length (tau = new tokens per target call), accept_at_position, target/draft
calls, new tokens, tokens/s; it also prints one ``relaxspec: ...`` line per task before lm-eval's table.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from omegaconf import OmegaConf
from tqdm.auto import tqdm

log = logging.getLogger(__name__)

# lm-eval's own construction arguments that relaxspec does not use
_IGNORED = {"max_batch_size", "trust_remote_code", "dtype", "parallelize", "pretrained"}


def _bool(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


def _cut_stop(text: str, stops: list[str]) -> str:
    cut = len(text)
    for s in stops:
        if s and s in text:
            cut = min(cut, text.index(s))
    return text[:cut]


def compose_config(pair: str = "qwen25_coder", method: str = "sd", draft: str = "constant",
                   overrides: list[str] | None = None) -> Any:
    """The validated relaxspec evaluate config for these choices (Hydra compose of conf/evaluate.yaml)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from relaxspec.config import CONF_DIR, validate

    ovr = [f"pair={pair}", f"method={method}", f"draft={draft}", *(overrides or [])]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="evaluate", overrides=ovr)
    finally:
        GlobalHydra.instance().clear()
    validate(cfg)
    return cfg


@register_model("relaxspec")
class RelaxSpecLM(TemplateLM):
    """relaxspec decoding methods behind lm-eval's LM interface (see the module docstring)."""

    def __init__(self, pair: str = "qwen25_coder", method: str = "sd", head: str | None = None,
                 draft: str = "constant", temperature: float | None = None, top_k: int | None = None,
                 top_p: float | None = None, draft_length: int | None = None, max_gen_toks: int | None = None,
                 batch_size: int | str = 1, max_length: int | None = None, chat: bool | str = False,
                 seed: int = 0, stats_path: str | None = None, device: str | None = None, **kwargs: Any):
        super().__init__()
        from relaxspec.decoding.lm import CausalLM
        from relaxspec.decoding.methods import build_method
        from relaxspec.models.pairs import load_pair

        unknown = [k for k in kwargs if "." not in k and k not in _IGNORED]
        if unknown:
            raise ValueError(f"relaxspec: unknown model_args {unknown}; known: pair, method, head, draft, "
                             "temperature, top_k, top_p, draft_length, max_gen_toks, batch_size, max_length, "
                             "chat, seed, stats_path, device, and dotted Hydra overrides (pair.target.path=...)")
        overrides = [f"{k}={v}" for k, v in kwargs.items() if "." in k]
        if head:
            overrides.append(f"method.head={head}")
        if draft_length is not None:
            overrides.append(f"decode.draft_length={int(draft_length)}")
        if device:
            overrides.append(f"pair.device={device}")
        # the decode group's temperature only matters for validation (e.g. ASD is greedy only)
        overrides.append(f"decode.temperature={0.0 if temperature is None else float(temperature)}")
        self.cfg = compose_config(str(pair), str(method), str(draft), overrides)
        self.temperature = None if temperature is None else float(temperature)
        self.top_k = None if top_k is None else int(top_k)
        self.top_p = None if top_p is None else float(top_p)
        self.max_gen_toks = None if max_gen_toks is None else int(max_gen_toks)
        self.batch_size_ = 1 if str(batch_size).startswith("auto") else max(1, int(batch_size))
        self.chat = _bool(chat)
        self.seed = int(seed)
        self.stats_path = stats_path

        self.pair = load_pair(self.cfg.pair)
        self.tokenizer = self.pair.tokenizer
        self.k = int(self.cfg.decode.draft_length)
        lms = {"target": CausalLM(self.pair.target), "draft": CausalLM(self.pair.draft)}
        self.method = build_method(self.cfg.method, self.pair, draft_length=self.k, lms=lms,
                                   draft_cfg=self.cfg.get("draft"), batch_size=self.batch_size_)
        self._max_length = int(max_length) if max_length else int(self.pair.context_length)
        self._device = self.pair.target.device
        self.records: list[dict[str, Any]] = []  # one per generated row: task, stats, wall time share
        self._n_batches = 0
        self._ll_requests = 0

    # ---------------------------------------------------------------------------------- construction

    @classmethod
    def _merge_args(cls, args: dict[str, Any], additional: dict[str, Any] | None) -> dict[str, Any]:
        """model_args win over lm-eval's CLI defaults (``--batch_size`` 1, ``--device cuda:0``)."""
        extra = {k: v for k, v in (additional or {}).items() if v is not None and k != "device"}
        return {**extra, **args}

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        from lm_eval.utils import simple_parse_args_string

        return cls(**cls._merge_args(simple_parse_args_string(arg_string), additional_config))

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None):
        return cls(**cls._merge_args(dict(arg_dict), additional_config))

    # ---------------------------------------------------------------------------------- tokenisation

    @property
    def eot_token_id(self) -> int:
        eos = self.tokenizer.eos_token_id
        return int(eos if eos is not None else self.pair.eos_ids[0])

    @property
    def prefix_token_id(self) -> int:
        bos = self.tokenizer.bos_token_id
        return int(bos) if bos is not None else self.eot_token_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def tokenizer_name(self) -> str:
        return f"relaxspec-{self.pair.name}"

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        return list(self.tokenizer.encode(string, add_special_tokens=bool(add_special_tokens)))

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    # ---------------------------------------------------------------------------------- loglikelihood

    @torch.inference_mode()
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        """Score each continuation with the target: (sum of log p, whether greedy decoding would produce it)."""
        body, head = self.pair.target.get_decoder(), self.pair.target.get_output_embeddings()
        items = []
        for j, (_, ctx, cont) in enumerate(requests):
            full = list(ctx) + list(cont)
            inp = full[-(self.max_length + 1):][:-1]
            n_cont = min(len(cont), len(inp))
            items.append((j, inp, list(cont)[-n_cont:] if n_cont else []))
        items.sort(key=lambda t: -len(t[1]))  # similar lengths share a batch
        out: list[tuple[float, bool] | None] = [None] * len(items)
        bs = self.batch_size_
        pad = self.eot_token_id
        for s in tqdm(range(0, len(items), bs), desc="relaxspec loglikelihood (target)", disable=disable_tqdm):
            chunk = items[s:s + bs]
            width = max(len(inp) for _, inp, _ in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, (_, inp, _) in enumerate(chunk):  # right padding: positions of real tokens unchanged
                ids[r, : len(inp)] = torch.tensor(inp)
                mask[r, : len(inp)] = 1
            hidden = body(input_ids=ids.to(self._device), attention_mask=mask.to(self._device)).last_hidden_state
            for r, (j, inp, cont) in enumerate(chunk):
                n = len(inp)
                if not cont:
                    out[j] = (0.0, True)
                    continue
                logits = head(hidden[r, n - len(cont): n]).float().log_softmax(-1)
                tgt = torch.tensor(cont, device=logits.device)
                lp = float(logits.gather(-1, tgt[:, None]).sum())
                greedy = bool((logits.argmax(-1) == tgt).all())
                out[j] = (lp, greedy)
        self._ll_requests += len(requests)
        for req, res in zip(requests, out, strict=True):
            if req[0] is not None:
                self.cache_hook.add_partial("loglikelihood", req[0], res)
        return out  # type: ignore[return-value]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        from lm_eval import utils

        results = []
        for req in tqdm(requests, desc="relaxspec loglikelihood_rolling (target)", disable=disable_tqdm):
            (string,) = req.args
            windows = list(map(utils.make_disjoint_window, utils.get_rolling_token_windows(
                token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                max_seq_len=self.max_length, context_len=1)))
            scores = self._loglikelihood_tokens([(None, ctx, cont) for ctx, cont in windows], disable_tqdm=True)
            total = float(sum(lp for lp, _ in scores))
            results.append(total)
            self.cache_hook.add_partial("loglikelihood_rolling", (string,), total)
        return results

    # ---------------------------------------------------------------------------------- generation

    def _gen_settings(self, gen_kwargs: dict[str, Any]) -> tuple[list[str], int, Any]:
        from relaxspec.decoding.sampling import SamplingParams

        gk = dict(gen_kwargs or {})
        until = gk.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        max_new = self.max_gen_toks or int(gk.get("max_gen_toks") or 256)
        if self.temperature is not None:
            temp = self.temperature
        elif _bool(gk.get("do_sample", False)) or (gk.get("temperature") not in (None, 0, 0.0)
                                                    and "do_sample" not in gk):
            temp = float(gk.get("temperature", 1.0))
        else:
            temp = 0.0
        top_k = self.top_k if self.top_k is not None else int(gk.get("top_k") or 0)
        top_p = self.top_p if self.top_p is not None else float(gk.get("top_p") or 1.0)
        return until, max_new, SamplingParams(temperature=temp, top_k=top_k, top_p=top_p)

    def _prompt_ids(self, context: str, max_new: int) -> list[int]:
        if self.chat:
            ids = self.pair.render([{"role": "user", "content": context}])
        else:
            ids = self.pair.render(context) or [self.prefix_token_id]
        room = self.pair.context_length - max_new - int(getattr(self.method, "max_draft_len", self.k)) - 2
        return ids[-max(1, room):]

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        from relaxspec.decoding.generate import StopChecker

        results: list[str | None] = [None] * len(requests)
        groups: dict[str, list[int]] = defaultdict(list)
        for i, req in enumerate(requests):
            groups[json.dumps(req.args[1], sort_keys=True, default=str)].append(i)
        bar = tqdm(total=len(requests), desc=f"relaxspec generate ({self.method.name})", disable=disable_tqdm)
        for idx in groups.values():
            until, max_new, params = self._gen_settings(requests[idx[0]].args[1])
            stopper = StopChecker(self.pair.eos_ids, until, self.tokenizer)
            for s in range(0, len(idx), self.batch_size_):
                chunk = idx[s:s + self.batch_size_]
                prompts = [self._prompt_ids(requests[i].args[0], max_new) for i in chunk]
                gen = torch.Generator(device=self.pair.target.device).manual_seed(
                    self.seed * 1_000_003 + self._n_batches)
                self._n_batches += 1
                t0 = time.perf_counter()
                outs, _timing = self.method.generate(prompts, params=params, max_new_tokens=[max_new] * len(chunk),
                                                     stopper=stopper, generator=gen)
                dt = time.perf_counter() - t0
                n_tok = max(1, sum(len(o.tokens) for o in outs))
                for i, o in zip(chunk, outs, strict=True):
                    text = _cut_stop(self.tokenizer.decode(o.tokens, skip_special_tokens=True), until)
                    results[i] = text
                    self.records.append({"task": getattr(requests[i], "task_name", None) or "all",
                                         "stats": vars(o.stats), "wall_time_s": dt * len(o.tokens) / n_tok,
                                         "temperature": params.temperature})
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                bar.update(len(chunk))
        bar.close()
        return results  # type: ignore[return-value]

    # ---------------------------------------------------------------------------------- reporting

    def acceptance_report(self) -> dict[str, Any]:
        """Acceptance metrics of everything generated so far, overall and per lm-eval task."""
        from relaxspec.evaluation.metrics import method_metrics

        def pick(recs: list[dict[str, Any]]) -> dict[str, Any]:
            m = method_metrics(recs)
            keys = ("n_samples", "new_tokens", "target_calls", "draft_calls", "drafted", "accepted",
                    "acceptance_rate", "mean_accepted_length", "accept_at_position", "mean_w_target",
                    "wall_time_s", "tokens_per_second")
            return {k: m[k] for k in keys if k in m}

        by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in self.records:
            by_task[r["task"]].append(r)
        mc = self.cfg.method
        return {
            "pair": self.pair.name,
            "method": mc.name,
            "rule": mc.get("rule"),
            "head": mc.get("head"),
            "draft_length": self.k,
            "draft": (OmegaConf.to_container(self.cfg.draft, resolve=True)
                      if self.cfg.get("draft") is not None else None),
            "temperature": self.temperature,
            "batch_size": self.batch_size_,
            "chat": self.chat,
            "loglikelihood_requests_scored_by": "target",
            "loglikelihood_requests": self._ll_requests,
            "overall": pick(self.records) if self.records else None,
            "tasks": {t: pick(rs) for t, rs in sorted(by_task.items())},
        }

    def report_lines(self, report: dict[str, Any] | None = None) -> list[str]:
        rep = report or self.acceptance_report()
        lines = []
        for task, m in rep["tasks"].items():
            acc, tau = m.get("acceptance_rate"), m.get("mean_accepted_length")
            lines.append(f"relaxspec: task={task} method={rep['method']} pair={rep['pair']} k={rep['draft_length']} "
                         f"acceptance={'n/a' if acc is None else f'{acc:.3f}'} "
                         f"tau={'n/a' if tau is None else f'{tau:.2f}'} new_tokens={m['new_tokens']} "
                         f"target_calls={m['target_calls']} samples={m['n_samples']}")
        if not lines:
            lines.append(f"relaxspec: method={rep['method']} pair={rep['pair']}: no generate_until requests "
                         f"({rep['loglikelihood_requests']} loglikelihood requests scored by the target)")
        return lines

    def get_model_info(self) -> dict[str, Any]:
        """Called by lm-eval after the evaluation; merged into ``results["config"]``."""
        rep = self.acceptance_report()
        for line in self.report_lines(rep):
            print(line, flush=True)
        if self.stats_path:
            from relaxspec.utils.io import atomic_write_json

            Path(self.stats_path).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.stats_path, rep)
        return {"relaxspec": rep}

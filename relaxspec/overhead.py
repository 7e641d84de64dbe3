"""Where a speculative round's time goes: model forwards vs everything else (``make overhead``).

    python -m relaxspec.overhead                                   # embedded pair, B=1 and 8, greedy and T=1
    python -m relaxspec.overhead --pair tiny --prompts 2 --max-new-tokens 8 --batch-sizes 1   # CI smoke

Runs relaxspec SD (``sd`` rule, constant k) on HumanEval/GSM8K prompts with timers wrapped around the pieces
of a round, without changing the loop: ``relaxspec.decoding.generate``'s module-level helpers are replaced by
timed wrappers for the duration of the run and restored afterwards. Components (seconds summed over rounds):

* ``forward_draft`` / ``forward_target``: the model bodies + LM head on the needed positions (`CausalLM.forward`);
* ``probs``: softmax (+ temperature / top-k / top-p) over the vocabulary, draft steps and the verify pass;
* ``draw``: token draws from q (argmax or multinomial);
* ``rule``: the verification rule (`_verify_ragged`);
* ``cache``: slot invalidation, trims, compaction and row selection (`CausalLM.invalidate/trim/compact/select`);
* ``other``: the rest of the round (Python control, stats, host transfers), = round time - the above.

Round time excludes the prefill (reported separately). The goal of the performance issue is
``1 - forward share < 10 %`` of round time. Writes ``overhead.json`` and ``overhead.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from relaxspec.config import CONF_DIR
from relaxspec.decoding import generate as gen_mod
from relaxspec.decoding.generate import BatchTiming, StopChecker
from relaxspec.decoding.lm import CausalLM
from relaxspec.decoding.sampling import SamplingParams
from relaxspec.utils.io import atomic_write_json, atomic_write_text
from relaxspec.utils.provenance import provenance
from relaxspec.verify import get_rule

COMPONENTS = ("forward_draft", "forward_target", "probs", "draw", "rule", "cache")


def _timed(fn: Any, acc: dict[str, float], key: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            k = key(*a) if callable(key) else key
            if k is not None:
                acc[k] += time.perf_counter() - t0

    return wrapper


@contextlib.contextmanager
def instrument(target: CausalLM, draft: CausalLM | None) -> Iterator[dict[str, float]]:
    """Accumulate per-component seconds while active (forwards split by model; prefill forwards left out)."""
    acc: dict[str, float] = defaultdict(float)
    names = {id(target): "forward_target"}
    if draft is not None:
        names[id(draft)] = "forward_draft"
    saved_mod = {n: getattr(gen_mod, n) for n in ("probs", "draw", "_verify_ragged", "_prefill")}
    saved_lm = {n: CausalLM.__dict__[n] for n in ("forward", "invalidate", "trim", "compact", "select")}
    in_prefill = [False]

    def fwd_key(self: CausalLM, *a: Any) -> str | None:
        return None if in_prefill[0] else names.get(id(self))

    def prefill(*a: Any, **kw: Any) -> Any:  # its forwards are not round time (the loop's BatchTiming has it)
        in_prefill[0] = True
        try:
            return saved_mod["_prefill"](*a, **kw)
        finally:
            in_prefill[0] = False

    try:
        gen_mod.probs = _timed(saved_mod["probs"], acc, "probs")
        gen_mod.draw = _timed(saved_mod["draw"], acc, "draw")
        gen_mod._verify_ragged = _timed(saved_mod["_verify_ragged"], acc, "rule")
        gen_mod._prefill = prefill
        CausalLM.forward = _timed(saved_lm["forward"], acc, fwd_key)
        for n in ("invalidate", "trim", "compact", "select"):
            timed = _timed(saved_lm[n].__func__, acc, lambda *a: None if in_prefill[0] else "cache")
            setattr(CausalLM, n, staticmethod(timed))
        yield acc
    finally:
        for n, f in saved_mod.items():
            setattr(gen_mod, n, f)
        for n, f in saved_lm.items():  # the original descriptors themselves
            setattr(CausalLM, n, f)


def profile_rounds(pair: Any, prompts: list[list[int]], *, k: int, batch_size: int, temperature: float,
                   max_new_tokens: int, seed: int = 0) -> dict[str, Any]:
    """One SD run over ``prompts`` in batches of ``batch_size``; the per-component split of round time."""
    lms = {"target": CausalLM(pair.target), "draft": CausalLM(pair.draft)}
    stop = StopChecker(pair.eos_ids)
    params = SamplingParams(temperature)
    gen = torch.Generator().manual_seed(seed)
    rule = get_rule("sd")

    def run(batch: list[list[int]], n_new: int, timing: BatchTiming | None = None) -> list[Any]:
        return gen_mod.generate_speculative(lms["draft"], lms["target"], batch, params=params, rule=rule, k=k,
                                            max_new_tokens=[n_new] * len(batch), stopper=stop, generator=gen,
                                            timing=timing)

    run(prompts[:1], 8)  # warm-up
    tokens = rounds = 0
    total = prefill_wall = 0.0
    with instrument(lms["target"], lms["draft"]) as acc:
        for s in range(0, len(prompts), batch_size):
            batch = prompts[s : s + batch_size]
            timing = BatchTiming()
            t0 = time.perf_counter()
            outs = run(batch, max_new_tokens, timing)
            total += time.perf_counter() - t0
            prefill_wall += timing.prefill
            tokens += sum(len(o.tokens) for o in outs)
            rounds += max(o.stats.rounds for o in outs)
        parts = {c: acc.get(c, 0.0) for c in COMPONENTS}
    round_time = total - prefill_wall
    parts["other"] = max(0.0, round_time - sum(parts.values()))
    share = {c: v / round_time for c, v in parts.items()} if round_time > 0 else {}
    fwd = parts["forward_draft"] + parts["forward_target"]
    return {
        "batch_size": batch_size, "temperature": temperature, "k": k, "tokens": tokens, "rounds": rounds,
        "seconds": total, "prefill_s": prefill_wall, "round_s": round_time, "tokens_per_s": tokens / total,
        "ms_per_round": 1e3 * round_time / max(1, rounds), "components_s": parts, "share": share,
        "non_forward_share": 1.0 - fwd / round_time if round_time > 0 else None,
    }


def write_report(res: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "overhead.json", res)
    cols = [*COMPONENTS, "other"]
    lines = [
        f"# Round overhead: {res['pair'].get('name', '?')}, k={res['k']}, {res['prompts']} prompts x "
        f"{res['max_new_tokens']} tokens",
        "",
        "Share of round time (prefill excluded); `non-fwd` = everything outside the two models' forwards.",
        "",
        "| B | T | tok/s | ms/round | " + " | ".join(cols) + " | non-fwd |",
        "|---|---|---|---|" + "---|" * len(cols) + "---|",
    ]
    for r in res["runs"]:
        cells = " | ".join(f"{100 * r['share'].get(c, 0):.1f} %" for c in cols)
        lines.append(f"| {r['batch_size']} | {r['temperature']:g} | {r['tokens_per_s']:.2f} | "
                     f"{r['ms_per_round']:.1f} | {cells} | {100 * r['non_forward_share']:.1f} % |")
    atomic_write_text(out / "overhead.md", "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    from relaxspec.bench import _prompts
    from relaxspec.models.pairs import load_pair

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", default="qwen25_coder")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.k < 1 or args.prompts < 1 or args.max_new_tokens < 1 or min(args.batch_sizes) < 1:
        ap.error("--k, --prompts, --max-new-tokens and --batch-sizes must be >= 1")
    torch.set_num_threads(args.threads)
    pair = load_pair(OmegaConf.load(CONF_DIR / "pair" / f"{args.pair}.yaml"))
    prompts = _prompts(pair, args.prompts)
    runs = []
    for bs in args.batch_sizes:
        for t in args.temperatures:
            r = profile_rounds(pair, prompts, k=args.k, batch_size=bs, temperature=t,
                               max_new_tokens=args.max_new_tokens)
            print(f"B={bs} T={t:g}: {r['tokens_per_s']:.2f} tok/s, {r['ms_per_round']:.1f} ms/round, non-forward "
                  f"{100 * r['non_forward_share']:.1f} %: " +
                  ", ".join(f"{c} {1e3 * v / max(1, r['rounds']):.1f} ms" for c, v in r["components_s"].items()))
            runs.append(r)
    res = {"pair": pair.info, "k": args.k, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
           "threads": args.threads, "runs": runs, "provenance": provenance()}
    out = Path(args.out or f"outputs/overhead/{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    write_report(res, out)
    print(f"wrote {out / 'overhead.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

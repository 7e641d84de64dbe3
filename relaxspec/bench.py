"""Speed benchmark: relaxspec against Hugging Face, side by side, in one process (``make bench``).

    python -m relaxspec.bench                       # embedded pair, HumanEval + GSM8K prompts
    python -m relaxspec.bench --pair tiny --prompts 2 --max-new-tokens 16 --reps 1   # CI smoke

Rows (each on the same prompts; every batch-1 row runs prompt i, in a rotated order, before any row
runs prompt i+1, and batched AR/SD alternate per chunk, so machine drift cancels):
HF ``generate`` AR, HF assisted generation (same draft, same k, constant schedule) on relaxspec's CPU backends
and (``--hf-stock``, default) on a second copy of the pair with stock eager fp32 kernels, relaxspec AR, relaxspec SD
(greedy and T=1), static ensemble and DIVERSED (untrained head unless ``--head``), at batch sizes 1, 4 and 8
for relaxspec AR/SD. Per row: tokens/s, speedup vs relaxspec AR at the same batch size and temperature (the same
target backend), τ, and whether greedy outputs equal relaxspec AR's. Per-forward costs are measured after a
realistic prefill: target T(n) for n = 1..k+1 tokens, draft T(1); from them v(k+1) = T_t(k+1)/T_t(1),
c = T_d(1)/T_t(1) and the bound τ / (k·c + v(k+1)).
Writes ``bench.json``, ``bench.md`` and ``cost_curves.png`` into ``--out`` (default ``outputs/bench/<time>``).
Speed goals live here, never in timed tests.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from relaxspec.config import CONF_DIR
from relaxspec.decoding.generate import StopChecker
from relaxspec.decoding.lm import CausalLM
from relaxspec.decoding.methods import build_method
from relaxspec.decoding.sampling import SamplingParams
from relaxspec.utils.io import atomic_write_json, atomic_write_text
from relaxspec.utils.provenance import provenance


def _prompts(pair, n: int) -> list[list[int]]:
    """Half HumanEval chat prompts, half GSM8K chat prompts (fall back to smoke prompts when data is missing)."""
    from relaxspec.tasks import build_task

    out: list[list[int]] = []
    for name in ("humaneval", "gsm8k"):
        try:
            task = build_task({"name": name, "split": "test", "seed": None})
            exs = task.examples(split="test", limit=max(1, (n + 1) // 2), seed=None)
            out += [pair.render(task.messages(ex, [])) for ex in exs]
        except Exception as exc:  # data not available: still benchmark on smoke prompts
            print(f"[bench] {name} prompts unavailable ({exc}); using smoke prompts")
    if not out:
        smoke = OmegaConf.load(CONF_DIR / "dataset" / "smoke.yaml").prompts
        out = [pair.render([{"role": "user", "content": p}]) for p in smoke]
    while len(out) < n:
        out += out
    return out[:n]


def measure_costs(pair, k_max: int, prefill: int = 128, reps: int = 5, batch: int = 1) -> dict[str, Any]:
    """Median forward times (s): target for 1..k_max tokens and draft for 1 token, after a prefill, ``batch`` rows."""
    high = min(5000, len(pair.tokenizer) - 1)
    ids = torch.randint(0, high, (batch, prefill))
    lms = {"target": CausalLM(pair.target), "draft": CausalLM(pair.draft)}
    states = {}
    for role, lm in lms.items():
        states[role] = lm.new_state(batch)
        lm.forward(states[role], ids, keep=0)
    samples: dict[str, list[float]] = {f"target_{n}": [] for n in range(1, k_max + 1)}
    samples["draft_1"] = []
    for _ in range(reps + 1):  # first pass is warm-up
        for key in samples:
            role, n = key.split("_")
            lm, st = lms[role], states[role]
            x = torch.randint(0, high, (batch, int(n)))
            t0 = time.perf_counter()
            lm.forward(st, x, keep=int(n) if role == "target" else 1)
            samples[key].append(time.perf_counter() - t0)
            st.cache.crop(-int(n))
            st.valid = st.valid[:, : -int(n)]
    med = {key: statistics.median(v[1:]) for key, v in samples.items()}
    t1 = med["target_1"]
    return {
        "target_ms": [1000 * med[f"target_{n}"] for n in range(1, k_max + 1)],
        "draft_ms": 1000 * med["draft_1"],
        "v": [med[f"target_{n}"] / t1 for n in range(1, k_max + 1)],
        "c": med["draft_1"] / t1,
        "prefill": prefill,
        "batch": batch,
    }


def batch_scaling(pair, k: int, batch_sizes: list[int], reps: int = 3,
                  measured: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Per-forward costs at each batch size and what they allow, at equal tau, relative to batch 1.

    ``ar_scaling[B]`` = B * T_t(1, 1) / T_t(B, 1) (AR tokens/s at B over B=1); ``sd_round_scaling[B]`` =
    B * R(1) / R(B) with the round cost R(B) = k * T_d(B, 1) + T_t(B, k+1): the most SD at batch B can gain over
    B=1 if tau were the same and nothing but the forwards cost time. ``measured`` holds `measure_costs` results
    already taken (by batch size, with at least k+1 target lengths), which are reused instead of measured again.
    """
    out: dict[str, Any] = {"batch_sizes": list(batch_sizes), "target_1_ms": {}, "target_k1_ms": {}, "draft_1_ms": {}}
    for b in batch_sizes:
        c = (measured or {}).get(b) or measure_costs(pair, k + 1, reps=reps, batch=b)
        out["target_1_ms"][b], out["target_k1_ms"][b] = c["target_ms"][0], c["target_ms"][k]
        out["draft_1_ms"][b] = c["draft_ms"]
    r = {b: k * out["draft_1_ms"][b] + out["target_k1_ms"][b] for b in batch_sizes}
    b0 = min(batch_sizes)
    out["ar_scaling"] = {b: (b / b0) * out["target_1_ms"][b0] / out["target_1_ms"][b] for b in batch_sizes}
    out["sd_round_scaling"] = {b: (b / b0) * r[b0] / r[b] for b in batch_sizes}
    return out


def _method_cfg(name: str, **over: Any):
    cfg = OmegaConf.load(CONF_DIR / "method" / f"{name}.yaml")
    for key, val in over.items():
        cfg[key] = val
    return cfg


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    from relaxspec.models.pairs import load_pair

    torch.set_num_threads(args.threads)
    pair_cfg = OmegaConf.load(CONF_DIR / "pair" / f"{args.pair}.yaml")
    pair = load_pair(pair_cfg)
    prompts = _prompts(pair, args.prompts)
    k = args.k
    stop = StopChecker(pair.eos_ids)
    lms = {"target": CausalLM(pair.target), "draft": CausalLM(pair.draft)}
    div_cfg = _method_cfg("diversed", head=args.head)
    methods = {
        "ar": build_method(_method_cfg("ar"), pair, draft_length=k, lms=lms),
        "sd": build_method(_method_cfg("sd"), pair, draft_length=k, lms=lms),
        "static_ensemble": build_method(_method_cfg("static_ensemble"), pair, draft_length=k, lms=lms),
        "diversed": build_method(div_cfg, pair, draft_length=k, lms=lms),
    }
    rows: list[tuple[str, str, float, int]] = []  # (label, method, temperature, batch)
    for bs in args.batch_sizes:
        rows += [(f"relaxspec AR b{bs}", "ar", 0.0, bs), (f"relaxspec SD greedy b{bs}", "sd", 0.0, bs)]
    rows += [("relaxspec AR T=1", "ar", 1.0, 1), ("relaxspec SD T=1", "sd", 1.0, 1),
             ("static ensemble T=1", "static_ensemble", 1.0, 1), ("DIVERSED T=1", "diversed", 1.0, 1)]
    hf_rows: list[tuple[str, str, Any]] = [("HF generate AR", "hf_ar", pair), ("HF assisted", "hf_assisted", pair)]
    if args.hf_stock:  # what a user of plain transformers gets: both models on the stock (eager fp32) kernels
        stock_cfg = OmegaConf.merge(pair_cfg, {"draft": {"backend": "eager"}, "target": {"backend": "eager"}})
        stock = load_pair(stock_cfg)
        hf_rows += [("HF generate AR (stock)", "hf_ar", stock), ("HF assisted (stock)", "hf_assisted", stock)]
    results: dict[str, dict[str, Any]] = {}
    outputs: dict[tuple[str, int], list[int]] = {}

    def record(label: str, tokens: int, seconds: float, calls: int = 0) -> None:
        r = results.setdefault(label, {"tokens": 0, "seconds": 0.0, "target_calls": 0})
        r["tokens"] += tokens
        r["seconds"] += seconds
        r["target_calls"] += calls

    def hf_generate(kind: str, prompt: list[int], hf_pair: Any = pair) -> list[int]:
        kw: dict[str, Any] = {"max_new_tokens": args.max_new_tokens, "do_sample": False,
                              "eos_token_id": hf_pair.eos_ids, "pad_token_id": hf_pair.eos_ids[0]}
        if kind == "hf_assisted":
            gc = hf_pair.draft.generation_config
            gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = k, "constant"
            gc.assistant_confidence_threshold = 0.0
            kw["assistant_model"] = hf_pair.draft
        out = hf_pair.target.generate(torch.tensor([prompt]), **kw)
        return out[0, len(prompt):].tolist()

    # warm-up: one of each
    for _, m, t, _bs in rows[:2]:
        methods[m].generate(prompts[:1], params=SamplingParams(t), max_new_tokens=[8], stopper=stop)
    for _, kind, hp in hf_rows:
        hf_generate(kind, prompts[0], hp)

    def run_relaxspec(label: str, m: str, temp: float, start: int, bs: int, gen: torch.Generator) -> None:
        batch = prompts[start : start + bs]
        t0 = time.perf_counter()
        outs, _ = methods[m].generate(batch, params=SamplingParams(temp), generator=gen,
                                      max_new_tokens=[args.max_new_tokens] * len(batch), stopper=stop)
        dt = time.perf_counter() - t0
        record(label, sum(len(o.tokens) for o in outs), dt, sum(o.stats.target_calls for o in outs))
        for j, o in enumerate(outs):
            outputs[(label, start + j)] = o.tokens

    # Interleaving (machine drift cancels): every batch-1 row runs prompt i before any row runs prompt i+1, in
    # an order rotated per prompt; batched rows alternate AR / SD per chunk of prompts.
    singles = [(label, ("hf", kind, hp)) for label, kind, hp in hf_rows]
    singles += [(label, ("rs", m, temp)) for label, m, temp, bs in rows if bs == 1]
    for rep in range(args.reps):
        gen = torch.Generator().manual_seed(rep)
        for i, p in enumerate(prompts):
            shift = (i + rep) % len(singles)
            for label, (src, a, b) in singles[shift:] + singles[:shift]:
                if src == "hf":
                    t0 = time.perf_counter()
                    toks = hf_generate(a, p, b)
                    record(label, len(toks), time.perf_counter() - t0)
                    outputs[(label, i)] = toks
                else:
                    run_relaxspec(label, a, b, i, 1, gen)
        for bs in sorted({r[3] for r in rows if r[3] > 1}):
            group = [r for r in rows if r[3] == bs]
            for c, start in enumerate(range(0, len(prompts), bs)):
                for label, m, temp, _ in group if (c + rep) % 2 == 0 else group[::-1]:
                    run_relaxspec(label, m, temp, start, bs, gen)
    costs = measure_costs(pair, k + 1, reps=args.cost_reps)
    scaling = (batch_scaling(pair, k, args.batch_sizes, reps=args.cost_reps, measured={1: costs})
               if len(args.batch_sizes) > 1 else None)
    reference = {i: outputs[("relaxspec AR b1", i)] for i in range(len(prompts))}
    for label, r in results.items():
        r["tokens_per_s"] = r["tokens"] / r["seconds"] if r["seconds"] else None
        r["tau"] = r["tokens"] / r["target_calls"] if r["target_calls"] else None
        greedy = "T=1" not in label
        if greedy:
            r["identical_to_ar"] = all(outputs.get((label, i)) == reference[i] for i in range(len(prompts)))
    for label, r in results.items():
        bs_label = next((f"relaxspec AR b{b}" for b in args.batch_sizes if label.endswith(f" b{b}")), None)
        base = results.get(bs_label or ("relaxspec AR T=1" if "T=1" in label else "relaxspec AR b1"))
        if base and base["tokens_per_s"] and r["tokens_per_s"]:
            r["speedup_vs_relaxspec_ar"] = r["tokens_per_s"] / base["tokens_per_s"]
        if r.get("tau") and label.startswith(("relaxspec SD", "static", "DIVERSED")):
            r["bound"] = r["tau"] / (k * costs["c"] + costs["v"][k])
    hf_assist, sd1 = results.get("HF assisted"), results.get("relaxspec SD greedy b1")
    hf_stock = results.get("HF assisted (stock)")
    summary = {
        "v(k+1)": costs["v"][k],
        "c": costs["c"],
        "sd_greedy_vs_ar": results["relaxspec SD greedy b1"].get("speedup_vs_relaxspec_ar"),
        "sd_greedy_vs_hf_assisted": (sd1["tokens_per_s"] / hf_assist["tokens_per_s"]) if hf_assist and sd1 else None,
    }
    if hf_stock and sd1:
        summary["sd_greedy_vs_hf_assisted_stock"] = sd1["tokens_per_s"] / hf_stock["tokens_per_s"]
    big = max(args.batch_sizes)
    if big > 1 and f"relaxspec SD greedy b{big}" in results:
        summary[f"sd_b{big}_vs_b1"] = results[f"relaxspec SD greedy b{big}"]["tokens_per_s"] / sd1["tokens_per_s"]
    if scaling is not None:
        summary[f"sd_b{big}_vs_b1_forward_bound"] = scaling["sd_round_scaling"][big]
    return {"pair": pair.info, "k": k, "max_new_tokens": args.max_new_tokens, "prompts": len(prompts),
            "reps": args.reps, "rows": results, "costs": costs, "batch_scaling": scaling, "summary": summary,
            "provenance": provenance()}


def write_report(res: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "bench.json", res)
    lines = [f"# relaxspec bench ({res['pair']['name']}, k={res['k']}, {res['prompts']} prompts x {res['reps']} reps,"
             f" {res['max_new_tokens']} new tokens)", "",
             "| row | tokens/s | speedup vs relaxspec AR | tau | bound tau/(k c + v) | greedy output = AR |",
             "|---|---|---|---|---|---|"]

    def fmt(v: Any, spec: str = ".2f") -> str:
        return "–" if v is None else format(v, spec) if isinstance(v, float) else str(v)

    for label, r in res["rows"].items():
        lines.append(f"| {label} | {fmt(r['tokens_per_s'])} | {fmt(r.get('speedup_vs_relaxspec_ar'))} | "
                     f"{fmt(r.get('tau'))} | {fmt(r.get('bound'))} | {fmt(r.get('identical_to_ar'))} |")
    c = res["costs"]
    lines += ["", f"Per-forward cost after a {c['prefill']}-token prefill: target T(n) ms = "
              + ", ".join(f"{x:.0f}" for x in c["target_ms"]) + f"; draft T(1) = {c['draft_ms']:.0f} ms; "
              f"v(k+1) = {c['v'][-1]:.2f}; c = {c['c']:.3f}.", "",
              "Summary: " + ", ".join(f"{k} = {fmt(v, '.3f')}" for k, v in res["summary"].items())]
    sc = res.get("batch_scaling")
    if sc:
        lines += ["", "Batch scaling from per-forward costs (128-token prefill per row; equal tau assumed):", "",
                  "| B | target T(B,1) ms | target T(B,k+1) ms | draft T(B,1) ms | AR B-scaling | SD round B-scaling |",
                  "|---|---|---|---|---|---|"]
        for b in sc["batch_sizes"]:
            lines.append(f"| {b} | {sc['target_1_ms'][b]:.0f} | {sc['target_k1_ms'][b]:.0f} | "
                         f"{sc['draft_1_ms'][b]:.0f} | {sc['ar_scaling'][b]:.2f} | {sc['sd_round_scaling'][b]:.2f} |")
    atomic_write_text(out / "bench.md", "\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    n = list(range(1, len(c["target_ms"]) + 1))
    ax.plot(n, c["target_ms"], "o-", label="target T(n)")
    ax.axhline(c["draft_ms"], color="C1", ls="--", label="draft T(1)")
    ax.set_xlabel("tokens in forward")
    ax.set_ylabel("ms")
    ax.set_title("per-forward cost")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "cost_curves.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", default="qwen25_coder")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--cost-reps", type=int, default=5)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--threads", type=int, default=max(1, torch.get_num_threads()))
    ap.add_argument("--head", default=None, help="trained DIVERSED head dir (default: untrained)")
    ap.add_argument("--hf-stock", action=argparse.BooleanOptionalAction, default=True,
                    help="also time HF generate / assisted on a second copy of the pair with stock (eager fp32) "
                         "kernels, as plain transformers runs it (default: on)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if 1 not in args.batch_sizes or min(args.batch_sizes) < 1:
        ap.error("--batch-sizes must include 1 (the reference for outputs and speedups) and be >= 1")
    if min(args.prompts, args.max_new_tokens, args.reps, args.cost_reps, args.k) < 1:
        ap.error("--prompts, --max-new-tokens, --reps, --cost-reps and --k must be >= 1")
    out = Path(args.out or f"outputs/bench/{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    res = run_bench(args)
    write_report(res, out)
    print((out / "bench.md").read_text())
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

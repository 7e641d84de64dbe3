"""Draft-length comparison in one process: tau, acceptance and tokens/s per policy (greedy SD).

    python -m relaxspec.propose.compare --pair qwen25_coder --prompts 4 --max-new-tokens 96
    python -m relaxspec.propose.compare --pair tiny --prompts 2 --max-new-tokens 16 --reps 1   # smoke

Prompts: half HumanEval, half GSM8K (relaxspec.bench). Rows are interleaved per prompt and repetition so machine
drift cancels. LibraSpec uses the cached cost profile of the pair (measured first when missing).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from omegaconf import OmegaConf

from relaxspec.config import CONF_DIR


def _rows(k_list: list[int]) -> dict[str, dict[str, Any]]:
    load = lambda n: OmegaConf.to_container(OmegaConf.load(CONF_DIR / "draft" / f"{n}.yaml"))  # noqa: E731
    rows: dict[str, dict[str, Any]] = {}
    for k in k_list:
        rows[f"constant k={k}"] = {**load("constant"), "k": k}
    for n in ("heuristic", "confidence", "entropy", "libraspec"):
        rows[n] = load(n)
    rows["lookup constant k=5"] = {**load("constant"), "k": 5, "proposer": "prompt_lookup"}
    rows["lookup libraspec"] = load("prompt_lookup")
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", default="qwen25_coder")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--k", type=int, nargs="+", default=[3, 5, 7])
    ap.add_argument("--profile-k-max", type=int, default=12)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from relaxspec.bench import _prompts
    from relaxspec.decoding.generate import StopChecker
    from relaxspec.decoding.lm import CausalLM
    from relaxspec.decoding.methods import build_method
    from relaxspec.decoding.sampling import SamplingParams
    from relaxspec.models.pairs import load_pair
    from relaxspec.profile import run_profile
    from relaxspec.propose.cost import profile_path

    pair = load_pair(OmegaConf.load(CONF_DIR / "pair" / f"{args.pair}.yaml"))
    if not profile_path(pair).is_file():
        print("[compare] profiling", flush=True)
        run_profile(pair, k_max=args.profile_k_max)
    prompts = _prompts(pair, args.prompts)
    stop = StopChecker(pair.eos_ids)
    lms = {"target": CausalLM(pair.target), "draft": CausalLM(pair.draft)}
    sd_cfg = OmegaConf.load(CONF_DIR / "method" / "sd.yaml")
    methods = {"ar": build_method(OmegaConf.load(CONF_DIR / "method" / "ar.yaml"), pair, draft_length=5, lms=lms)}
    for name, dcfg in _rows(args.k).items():
        methods[name] = build_method(sd_cfg, pair, draft_length=5, lms=lms, draft_cfg=dcfg)
    res = {n: {"tokens": 0, "seconds": 0.0, "target_calls": 0, "drafted": 0, "accepted": 0, "rounds": 0}
           for n in methods}
    ref: dict[int, list[int]] = {}
    params = SamplingParams(0.0)
    methods["ar"].generate(prompts[:1], params=params, max_new_tokens=[8], stopper=stop)  # warm-up
    names = list(methods)
    for rep in range(args.reps):
        for i, p in enumerate(prompts):
            for n in names if (rep + i) % 2 == 0 else names[::-1]:
                t0 = time.perf_counter()
                outs, _ = methods[n].generate([p], params=params, max_new_tokens=[args.max_new_tokens], stopper=stop)
                dt = time.perf_counter() - t0
                s = outs[0].stats
                r = res[n]
                r["tokens"] += len(outs[0].tokens)
                r["seconds"] += dt
                r["target_calls"] += s.target_calls
                r["drafted"] += s.drafted
                r["accepted"] += s.accepted
                r["rounds"] += s.rounds
                if n == "ar":
                    ref[i] = outs[0].tokens
                r.setdefault("outs", {})[i] = outs[0].tokens
    ar_tps = res["ar"]["tokens"] / res["ar"]["seconds"]
    table = {}
    for n, r in res.items():
        tps = r["tokens"] / r["seconds"]
        table[n] = {"tokens_per_s": round(tps, 2), "speedup_vs_ar": round(tps / ar_tps, 3),
                    "tau": round(r["tokens"] / r["target_calls"], 3) if r["target_calls"] else None,
                    "acceptance": round(r["accepted"] / r["drafted"], 3) if r["drafted"] else None,
                    "mean_L": round(r["drafted"] / r["rounds"], 2) if r["rounds"] else None,
                    "equal_to_ar": all(r["outs"][i] == ref[i] for i in ref)}
    for n, row in table.items():
        print(f"{n:22s} " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    info = {"pair": pair.info, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "reps": args.reps,
            "threads": torch.get_num_threads(), "profile": str(profile_path(pair)), "rows": table}
    if args.out:  # a JSON file path; its folder is created
        from relaxspec.utils.io import atomic_write_json

        atomic_write_json(args.out, info)
    return info


if __name__ == "__main__":
    main()

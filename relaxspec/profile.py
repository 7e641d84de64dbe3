"""Measure the round-cost model of a pair on this machine (for the LibraSpec draft-length policy).

    python -m relaxspec.profile pair=qwen25_coder                 # Hydra overrides of conf/evaluate.yaml
    python -m relaxspec.profile pair=tiny --k-max 8 --reps 3 --batch-sizes 1 4 --out /tmp/prof

After a realistic prefill (``--prefill`` tokens of random ids), times a draft forward of n tokens and a target
forward of n tokens for n = 1..k_max (+1 for the target: a verify pass covers L + 1 tokens), each followed by
an exact cache rollback. Repetitions are interleaved (every (model, n) once per repetition, in an order that
alternates direction) so machine drift cancels, and each time is the median over repetitions (after one
warm-up pass). The result is cached as JSON at ``relaxspec.propose.cost.profile_path(pair)`` (keyed by pair
name, backends and a machine fingerprint), where ``draft=libraspec`` finds it, and plotted next to it (PNG).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from relaxspec.propose.cost import CostModel, machine_fingerprint, pair_backends, profile_path

__all__ = ["main", "measure", "plot_profile", "run_profile"]


def _ids(lm: Any, b: int, n: int) -> torch.Tensor:
    """Random ids inside the vocabulary (skipping the first ids, often specials)."""
    vocab = int(lm.model.config.vocab_size)
    lo = min(100, vocab // 4)
    return torch.randint(lo, min(vocab, 5000), (b, n))


def _forward_time(lm: Any, state: Any, n: int, keep: int, b: int) -> float:
    x = _ids(lm, b, n)
    t0 = time.perf_counter()
    lm.forward(state, x, keep=keep)
    dt = time.perf_counter() - t0
    state.cache.crop(-n)
    state.valid = state.valid[:, :-n]
    return dt


def measure(pair: Any, k_max: int, *, prefill: int = 256, reps: int = 7, batch: int = 1) -> dict[str, list[float]]:
    """Median ms of draft forwards of 1..k_max tokens and target forwards of 1..k_max+1 tokens at ``batch``."""
    from relaxspec.decoding.lm import CausalLM

    lms = {"draft": CausalLM(pair.draft), "target": CausalLM(pair.target)}
    states = {}
    ids = _ids(lms["target"], batch, prefill)
    for role, lm in lms.items():
        states[role] = lm.new_state(batch)
        lm.forward(states[role], ids, keep=0)
    keys = [("draft", n) for n in range(1, k_max + 1)] + [("target", n) for n in range(1, k_max + 2)]
    samples: dict[tuple[str, int], list[float]] = {key: [] for key in keys}
    for rep in range(reps + 1):  # rep 0 is warm-up
        order = keys if rep % 2 == 0 else keys[::-1]
        for role, n in order:
            dt = _forward_time(lms[role], states[role], n, keep=n if role == "target" else 1, b=batch)
            if rep:
                samples[(role, n)].append(dt)
    med = {key: 1000 * statistics.median(v) for key, v in samples.items()}
    return {"draft_ms": [med[("draft", n)] for n in range(1, k_max + 1)],
            "target_ms": [med[("target", n)] for n in range(1, k_max + 2)]}


def plot_profile(data: dict[str, Any], path: Path) -> None:
    """Measured forward times and the model-proposer round cost C(L) per batch size (PNG, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for b, curves in sorted(data["batches"].items(), key=lambda kv: int(kv[0])):
        d, t = curves["draft_ms"], curves["target_ms"]
        axes[0].plot(range(1, len(t) + 1), t, "o-", label=f"target b={b}")
        axes[0].plot(range(1, len(d) + 1), d, "s--", label=f"draft b={b}")
        cm = CostModel(draft_ms=d, target_ms=t)
        ls = list(range(0, len(d) + 1))
        axes[1].plot(ls, [cm.round_cost(L, "model") for L in ls], "o-", label=f"draft model b={b}")
        axes[1].plot(ls, [cm.round_cost(L, "prompt_lookup") for L in ls], "s--", label=f"prompt lookup b={b}")
    axes[0].set(xlabel="tokens per forward n", ylabel="median ms", title="forward cost after prefill")
    axes[1].set(xlabel="proposed tokens L", ylabel="ms per round", title="round cost C(L)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{data['pair']} ({data['backends']['draft']}/{data['backends']['target']}), "
                 f"prefill {data['prefill']}, median of {data['reps']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_profile(pair: Any, *, k_max: int = 16, prefill: int = 256, reps: int = 7, batch_sizes: tuple[int, ...] = (1,),
                out: Path | None = None, threads: int | None = None) -> tuple[Path, Path]:
    """Measure, write the JSON (cache path or ``out/<name>``) and the PNG beside it; return both paths."""
    from relaxspec.utils.io import atomic_write_json

    if threads:
        torch.set_num_threads(threads)
    fp, machine = machine_fingerprint()
    batches = {str(b): measure(pair, k_max, prefill=prefill, reps=reps, batch=b) for b in batch_sizes}
    data = {
        "pair": pair.name,
        "backends": pair_backends(pair),
        "fingerprint": fp,
        "machine": machine,
        "k_max": k_max,
        "prefill": prefill,
        "reps": reps,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "batches": batches,
    }
    path = profile_path(pair, fp)
    if out is not None:
        path = Path(out) / path.name
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, data)
    png = path.with_suffix(".png")
    plot_profile(data, png)
    return path, png


def _compose(overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from relaxspec.config import CONF_DIR, validate_pair

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="evaluate", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()
    validate_pair(cfg.pair)
    return cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m relaxspec.profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of conf/evaluate.yaml, e.g. pair=tiny")
    ap.add_argument("--k-max", type=int, default=16, help="largest draft length profiled (target up to k_max+1)")
    ap.add_argument("--prefill", type=int, default=256, help="context tokens before timing")
    ap.add_argument("--reps", type=int, default=7, help="interleaved timed repetitions (median)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1])
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--out", type=Path, default=None, help="write here instead of the profile cache")
    args = ap.parse_args(argv)
    from relaxspec.models.pairs import load_pair

    cfg = _compose(args.overrides)
    pair = load_pair(cfg.pair)
    path, png = run_profile(pair, k_max=args.k_max, prefill=args.prefill, reps=args.reps,
                            batch_sizes=tuple(args.batch_sizes), out=args.out, threads=args.threads)
    print(f"profile: {path}\nplot:    {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

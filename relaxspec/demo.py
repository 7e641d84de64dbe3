"""The demo (``make demo``): AR, SD, the static ensemble and DIVERSED on small GSM8K and HumanEval runs.

    python -m relaxspec.demo                          # 3 + 3 examples, 224 new tokens, T=1, ~12 min on 2 cores
    python -m relaxspec.demo --limit 10 --max-new-tokens 128 --out outputs/demo/big

Runs the embedded Qwen2.5-Coder 0.5B/1.5B pair (``pair=qwen25_coder``, CPU backends ``auto``) through the
ordinary harness (`relaxspec.evaluation.run` on composed ``evaluate`` configs, one run dir per dataset, the
pair loaded once), then `relaxspec.report` on the result: ``table.md``/``table.tex`` and the Pareto plot.

DIVERSED's head, first found of: ``$RELAXSPEC_HEAD``; ``$RELAXSPEC_CACHE/heads/diversed_gsm8k_qwen25/head``;
the newest ``outputs/train_diversed_gsm8k_qwen25/runs/*/head`` (what ``python train.py
+experiment=diversed_gsm8k_qwen25`` writes); the head shipped in the repository, ``heads/diversed_gsm8k_qwen25``
(trained by that experiment; its ``head.json`` and ``TRAINING.md`` say how). Without any, the untrained 0.5/0.5
head is used and the demo says so. Rerunning with the same ``--out`` resumes (finished (example, method) pairs are skipped).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime
from pathlib import Path

from relaxspec.config import CONF_DIR

ROOT = CONF_DIR.parent
HEAD_EXPERIMENT = "diversed_gsm8k_qwen25"
METHODS = ["ar", "sd", "static_ensemble", "diversed"]


def cache_dir() -> Path:
    return Path(os.environ.get("RELAXSPEC_CACHE") or Path.home() / ".cache" / "relaxspec")


def find_head() -> tuple[Path | None, str]:
    """The trained DIVERSED head to use and where it came from (None: untrained head)."""
    env = os.environ.get("RELAXSPEC_HEAD")
    if env:
        if not (Path(env) / "head.json").is_file():
            raise SystemExit(f"error: RELAXSPEC_HEAD={env} is not a head directory (no head.json)")
        return Path(env), "$RELAXSPEC_HEAD"
    well_known = cache_dir() / "heads" / HEAD_EXPERIMENT / "head"
    if (well_known / "head.json").is_file():
        return well_known, str(well_known)
    runs = sorted((ROOT / "outputs" / f"train_{HEAD_EXPERIMENT}" / "runs").glob("*/head/head.json"),
                  key=lambda p: p.stat().st_mtime)
    if runs:
        return runs[-1].parent, f"newest trainer run ({runs[-1].parent})"
    shipped = ROOT / "heads" / HEAD_EXPERIMENT
    if (shipped / "head.json").is_file():
        return shipped, f"shipped with the repository ({shipped.relative_to(ROOT)})"
    return None, "none found: UNTRAINED head (w = 0.5/0.5, i.e. the static ensemble at w_draft=0.5)"


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose(config_name="evaluate", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m relaxspec.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=3, help="examples per dataset (default 3)")
    ap.add_argument("--max-new-tokens", type=int, default=224,
                    help="new tokens per example (default 224: enough for most answers to finish)")
    ap.add_argument("--datasets", default="gsm8k,humaneval", help="comma-separated (default gsm8k,humaneval)")
    ap.add_argument("--temperature", type=float, default=1.0, help="decode temperature (default 1.0, Table 1)")
    ap.add_argument("--pair", default="qwen25_coder", help="pair config (default the embedded qwen25_coder)")
    ap.add_argument("--out", default=None, help="output dir (default outputs/demo/<date>)")
    args = ap.parse_args(argv)

    os.environ.setdefault("PROJECT_ROOT", str(ROOT))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    shared = ROOT.parent / "shared" / "data"
    if "RELAXSPEC_DATA" not in os.environ and (shared / "gsm8k").is_dir():
        os.environ["RELAXSPEC_DATA"] = str(shared)
    out = Path(args.out) if args.out else ROOT / "outputs" / "demo" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    head, head_src = find_head()
    print(f"demo: pair={args.pair}, methods={METHODS}, datasets={args.datasets}, {args.limit} examples each, "
          f"max_new_tokens={args.max_new_tokens}, T={args.temperature:g}")
    print(f"demo: DIVERSED head: {head_src}")
    print(f"demo: outputs in {out}")

    from relaxspec import evaluation
    from relaxspec.config import validate
    from relaxspec.report import report

    t0 = time.perf_counter()
    for ds in args.datasets.split(","):
        overrides = [f"pair={args.pair}", f"dataset={ds}", "method=diversed", f"methods=[{','.join(METHODS)}]",
                     f"dataset.limit={args.limit}", f"decode.max_new_tokens={args.max_new_tokens}",
                     f"decode.temperature={args.temperature}", "++warmup_tokens=16",
                     f"method.head={head if head else 'null'}", f"output_dir={out / ds}"]
        cfg = compose(overrides)
        validate(cfg)
        t1 = time.perf_counter()
        print(f"\n=== {ds}: python evaluate.py {' '.join(o for o in overrides if not o.startswith('output_dir'))}")
        evaluation.run(cfg)
        print(f"=== {ds}: {time.perf_counter() - t1:.0f} s")
    status, written = report(out, out / "report")
    if status == 0:
        print("\n" + (out / "report" / "table.md").read_text())
    print(f"demo: DIVERSED head: {head_src}")
    print(f"demo: wall time {time.perf_counter() - t0:.0f} s")
    print(f"demo: run dirs: {', '.join(str(out / d) for d in args.datasets.split(','))}")
    for p in written:
        print(f"demo: wrote {p}")
    return status


if __name__ == "__main__":
    sys.exit(main())

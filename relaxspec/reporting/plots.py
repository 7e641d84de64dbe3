"""PNG figures from result cells (matplotlib, Agg backend; no display needed).

* ``pareto_<pair>_T<t>_<dataset>.png``: acceptance rate (x) vs task quality (y) of the static ensemble
  across ``w_draft`` (a line through the weights), with SD and DIVERSED as separate markers.
* ``accept_position_<pair>_T<t>_<dataset>.png``: acceptance rate at each draft position, one line per method.
* ``speedup_vs_k_<pair>_T<t>_<dataset>.png``: speedup vs AR against the draft length, one line per method
  (only when the runs differ in ``decode.draft_length``).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from relaxspec.reporting.runs import DATASETS, PERCENT_METRICS, Cell


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _groups(cells: list[Cell]) -> dict[tuple[str, float, str], list[Cell]]:
    out: dict[tuple[str, float, str], list[Cell]] = defaultdict(list)
    for c in cells:
        out[(c.pair, c.temperature, c.dataset)].append(c)
    return out


def _stem(kind: str, key: tuple[str, float, str]) -> str:
    pair, t, ds = key
    return f"{kind}_{pair}_T{t:g}_{ds}.png"


def _qscale(cells: list[Cell]) -> tuple[float, str]:
    metric = next((c.quality_metric for c in cells if c.quality_metric), None) or "quality"
    return (100.0, f"{metric} (%)") if metric in PERCENT_METRICS else (1.0, metric)


def pareto(cells: list[Cell], out: Path) -> list[Path]:
    plt = _plt()
    written = []
    for key, group in sorted(_groups(cells).items()):
        static = sorted((c for c in group if c.family == "static_ensemble" and c.acceptance is not None
                         and c.quality is not None), key=lambda c: float(c.params.get("w_draft", 0)))
        div = [c for c in group if c.family == "diversed" and c.acceptance is not None and c.quality is not None]
        if len(static) < 2 and not div:
            continue
        scale, ylabel = _qscale(group)
        fig, ax = plt.subplots(figsize=(5.5, 4))
        if static:
            xs = [100 * c.acceptance for c in static]
            ys = [scale * c.quality for c in static]
            ax.plot(xs, ys, "o-", color="tab:blue", label="static ensemble (w_draft)")
            for c, x, y in zip(static, xs, ys, strict=True):
                ax.annotate(f"{float(c.params.get('w_draft', 0)):g}", (x, y), textcoords="offset points",
                            xytext=(4, 4), fontsize=8)
        for c in group:
            if c.family == "sd" and c.acceptance is not None and c.quality is not None:
                ax.plot([100 * c.acceptance], [scale * c.quality], "s", color="tab:gray", label="SD")
        for c in div:
            lab = c.label if not c.train_task or c.train_task == c.dataset else f"{c.label} (train: {c.train_task})"
            ax.plot([100 * c.acceptance], [scale * c.quality], "*", markersize=14, label=lab)
        ax.set_xlabel("acceptance rate (%)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{DATASETS.get(key[2], (key[2],))[0]}, T={key[1]:g}, {key[0]}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / _stem("pareto", key)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def accept_by_position(cells: list[Cell], out: Path) -> list[Path]:
    plt = _plt()
    written = []
    for key, group in sorted(_groups(cells).items()):
        lines = [c for c in sorted(group, key=lambda c: (c.sort_key, c.draft_length))
                 if any(a is not None for a in c.accept_at_position)]
        if not lines:
            continue
        ks = {c.draft_length for c in lines}
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for c in lines:
            pts = [(j + 1, 100 * a) for j, a in enumerate(c.accept_at_position) if a is not None]
            lab = c.label + (f" k={c.draft_length}" if len(ks) > 1 else "")
            if c.train_task and c.train_task != c.dataset:
                lab += f" (train: {c.train_task})"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=lab)
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance rate at position (%)")
        ax.set_ylim(0, 100)
        ax.set_title(f"{DATASETS.get(key[2], (key[2],))[0]}, T={key[1]:g}, {key[0]}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / _stem("accept_position", key)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def speedup_vs_draft_length(cells: list[Cell], out: Path) -> list[Path]:
    plt = _plt()
    written = []
    for key, group in sorted(_groups(cells).items()):
        spec = [c for c in group if c.family != "ar" and c.speedup is not None and c.timing]
        if len({c.draft_length for c in spec}) < 2:
            continue
        by_label: dict[str, list[Cell]] = defaultdict(list)
        for c in sorted(spec, key=lambda c: c.sort_key):
            by_label[c.label].append(c)
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for lab, cs in by_label.items():
            cs = sorted(cs, key=lambda c: c.draft_length)
            ax.plot([c.draft_length for c in cs], [c.speedup for c in cs], "o-", label=lab)
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_xlabel("draft length k")
        ax.set_ylabel("speedup vs AR (x)")
        ax.set_title(f"{DATASETS.get(key[2], (key[2],))[0]}, T={key[1]:g}, {key[0]}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / _stem("speedup_vs_k", key)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def all_plots(cells: list[Cell], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    return pareto(cells, out) + accept_by_position(cells, out) + speedup_vs_draft_length(cells, out)

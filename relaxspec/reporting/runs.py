"""Read run directories (``metrics.json`` + ``config.yaml``) into flat result cells.

A *run dir* is any directory holding both files (what ``evaluate.py`` writes); a *sweep dir* is any tree that
contains several. Each (run dir, method) pair becomes one `Cell`: the keys that place it in a table (pair,
temperature, dataset, method label, draft length, the task a DIVERSED head was trained on) and the numbers
that fill it. Nothing here recomputes a metric: tables are a pure function of the run files.

``train_task`` (Table 3) comes from ``metrics.json`` (``methods.<name>.train_task``, which the harness takes
from an explicit ``train_task=...`` config key, else the head's ``head.json`` meta ``task``, else the
training run's config next to the head); runs written before that field existed fall back to a top-level
``train_task`` key in ``config.yaml``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

# Display names and quality column headers, in the order columns and rows are printed.
DATASETS: dict[str, tuple[str, str]] = {
    "gsm8k": ("GSM8K", "Acc"),
    "math500": ("MATH-500", "Acc"),
    "humaneval": ("HumanEval", "P@1"),
    "mt_bench": ("MT-Bench", "Score"),
    "smoke": ("Smoke", "chars"),
}
PERCENT_METRICS = {"accuracy", "pass@1", "exact_match", "exact_match_strict"}
METHOD_ORDER = ["ar", "sd", "lossy", "static_ensemble", "cascade", "asd", "diversed"]
METHOD_NAMES = {"ar": "AR", "sd": "SD", "lossy": "Lossy SD", "static_ensemble": "Static ensemble",
                "cascade": "Cascade", "asd": "ASD", "diversed": "DIVERSED"}


@dataclass
class Cell:
    """One method's result in one run directory."""

    run_dir: Path
    pair: str
    dataset: str
    temperature: float
    draft_length: int
    max_new_tokens: int | None
    method: str  # the method's name in the run
    rule: str | None
    params: dict[str, Any]
    train_task: str | None
    head_trained: bool | None
    acceptance: float | None
    tau: float | None
    tokens_per_second: float | None
    speedup: float | None
    quality_metric: str | None
    quality: float | None
    quality_ci: tuple[float | None, float | None]
    accept_at_position: list[float | None] = field(default_factory=list)
    n_samples: int = 0
    timing: bool = True
    mtime: float = 0.0

    @property
    def family(self) -> str:
        """The method family used for ordering and naming (the rule, or ``ar``)."""
        return self.rule or "ar"

    @property
    def label(self) -> str:
        """Row label: the method plus the hyperparameter that distinguishes it (w_draft, lenience, ...)."""
        base = METHOD_NAMES.get(self.family, self.method)
        if self.family == "static_ensemble" and self.params.get("w_draft") is not None:
            return f"{base} (w_draft={float(self.params['w_draft']):g})"
        if self.family == "lossy" and self.params.get("lenience") is not None:
            return f"{base} (l={float(self.params['lenience']):g})"
        if self.family == "cascade":
            return f"{base} ({self.params.get('deferral')}, alpha={float(self.params.get('alpha', 0)):g})"
        if self.family == "diversed" and self.head_trained is False:
            return f"{base} (untrained head)"
        return base

    @property
    def sort_key(self) -> tuple:
        fam = METHOD_ORDER.index(self.family) if self.family in METHOD_ORDER else len(METHOD_ORDER)
        return (fam, float(self.params.get("w_draft") or 0.0), self.label)


def is_run_dir(path: Path) -> bool:
    return (path / "metrics.json").is_file() and (path / "config.yaml").is_file()


def find_run_dirs(root: str | Path) -> list[Path]:
    """``root`` itself if it is a run dir, else every run dir below it (sorted)."""
    root = Path(root)
    if is_run_dir(root):
        return [root]
    return sorted(p.parent for p in root.rglob("metrics.json") if is_run_dir(p.parent))


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and x == x else None


def load_cells(run_dir: Path) -> list[Cell]:
    """All method cells of one run directory."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    cfg = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=False)
    assert isinstance(cfg, dict)
    decode = cfg.get("decode") or {}
    dataset = (metrics.get("task") or {}).get("name") or (cfg.get("dataset") or {}).get("name")
    primary = (metrics.get("task") or {}).get("primary_metric")
    max_new = (metrics.get("provenance") or {}).get("max_new_tokens") or decode.get("max_new_tokens")
    cells = []
    for name, m in (metrics.get("methods") or {}).items():
        mcfg = m.get("method_config") or (cfg.get("method") if (cfg.get("method") or {}).get("name") == name else {})
        mcfg = dict(mcfg or {})
        q = m.get("quality") or {}
        metric = primary if primary in q else next((k for k, v in q.items() if k != "n" and _num(v) is not None
                                                    and not k.endswith(("_ci_low", "_ci_high"))), None)
        head = m.get("head") or {}
        train_task = m.get("train_task")
        if train_task is None and mcfg.get("rule") == "diversed":
            train_task = cfg.get("train_task")
        cells.append(Cell(
            run_dir=run_dir,
            pair=str((cfg.get("pair") or {}).get("name")),
            dataset=str(dataset),
            temperature=float(decode.get("temperature", 0.0)),
            draft_length=int(decode.get("draft_length", 0)),
            max_new_tokens=int(max_new) if max_new is not None else None,
            method=name,
            rule=mcfg.get("rule"),
            params={k: v for k, v in mcfg.items() if k not in ("name", "rule")},
            train_task=train_task,
            head_trained=head.get("trained") if head else None,
            acceptance=_num(m.get("acceptance_rate")),
            tau=_num(m.get("mean_accepted_length")),
            tokens_per_second=_num(m.get("tokens_per_second")),
            speedup=_num(m.get("speedup_vs_ar")),
            quality_metric=metric,
            quality=_num(q.get(metric)) if metric else None,
            quality_ci=(_num(q.get(f"{metric}_ci_low")), _num(q.get(f"{metric}_ci_high"))) if metric else (None, None),
            accept_at_position=list(m.get("accept_at_position") or []),
            n_samples=int(m.get("n_samples", 0)),
            timing=bool(metrics.get("timing", True)),
            mtime=(run_dir / "metrics.json").stat().st_mtime,
        ))
    return cells


def load_all(root: str | Path) -> list[Cell]:
    cells: list[Cell] = []
    for d in find_run_dirs(root):
        cells.extend(load_cells(d))
    return cells

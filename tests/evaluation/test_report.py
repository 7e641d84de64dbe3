"""`python -m relaxspec.report` on hand-made run dirs: paper-layout tables, refusal on holes, plots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from relaxspec.report import report

ROOT = Path(__file__).resolve().parents[2]


def make_run(d: Path, dataset: str, methods: dict[str, dict], *, temperature=1.0, k=5, pair="tiny",
             metric="accuracy", train_task=None):
    """A run dir as evaluate.py writes it; ``methods`` = {name: {rule, accept, quality, ...}}."""
    d.mkdir(parents=True)
    cfg = {"pair": {"name": pair}, "dataset": {"name": dataset},
           "decode": {"temperature": temperature, "draft_length": k, "max_new_tokens": 32},
           "method": {"name": "ar", "rule": None}}
    if train_task:
        cfg["train_task"] = train_task
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    out = {}
    for name, m in methods.items():
        mcfg = {"name": name, "rule": m.get("rule")}
        if m.get("rule") == "static_ensemble":
            mcfg["w_draft"] = m["w"]
        out[name] = {"n_samples": 4, "acceptance_rate": m.get("accept"), "mean_accepted_length": m.get("tau", 2.0),
                     "tokens_per_second": 10.0, "speedup_vs_ar": m.get("speedup", 1.5),
                     "accept_at_position": m.get("pos", [0.9, 0.8, 0.7]),
                     "quality": {"n": 4, metric: m["quality"], f"{metric}_ci_low": m["quality"] - 0.1,
                                 f"{metric}_ci_high": m["quality"] + 0.1},
                     "method_config": mcfg}
        if m.get("rule") == "diversed":
            out[name]["head"] = {"path": "/h", "trained": True, "task": m.get("train_task")}
            out[name]["train_task"] = m.get("train_task")
    (d / "metrics.json").write_text(json.dumps({"schema_version": 1, "timing": True,
                                                "task": {"name": dataset, "primary_metric": metric},
                                                "methods": out}))


def paper_runs(root: Path, datasets=("gsm8k", "humaneval")):
    metric = {"gsm8k": "accuracy", "humaneval": "pass@1"}
    for ds in datasets:
        make_run(root / f"dataset={ds}", ds, {
            "ar": {"rule": None, "accept": None, "quality": 0.67},
            "sd": {"rule": "sd", "accept": 0.446, "quality": 0.67},
            "static_ensemble": {"rule": "static_ensemble", "w": 0.5, "accept": 0.6, "quality": 0.6},
            "diversed": {"rule": "diversed", "accept": 0.7261, "quality": 0.67, "train_task": ds},
        }, metric=metric[ds])


def test_complete_sweep_gives_paper_tables(tmp_path):
    paper_runs(tmp_path / "sweep")
    status, written = report(tmp_path / "sweep", tmp_path / "out")
    assert status == 0
    md = (tmp_path / "out" / "table.md").read_text()
    assert "### Table 1, T=1, pair tiny" in md
    assert "| Method | GSM8K Accept | GSM8K Acc | HumanEval Accept | HumanEval P@1 |" in md
    assert "| DIVERSED | **72.61%** | 67.0% [57.0, 77.0] | **72.61%** | 67.0% [57.0, 77.0] |" in md
    assert "| SD | 44.60% | 67.0%" in md
    assert "| Static ensemble (w_draft=0.5) | 60.00% |" in md
    rows = [ln.split("|")[1].strip() for ln in md.splitlines() if ln.startswith("| ") and "Accept" in md]
    assert rows.index("AR") < rows.index("SD") < rows.index("Static ensemble (w_draft=0.5)") < rows.index("DIVERSED")
    tex = (tmp_path / "out" / "table.tex").read_text()
    assert "\\multicolumn{2}{c}{GSM8K} & \\multicolumn{2}{c}{HumanEval}" in tex
    assert "DIVERSED & \\textbf{72.61\\%} & 67.0\\% & \\textbf{72.61\\%} & 67.0\\% \\\\" in tex
    assert "Static ensemble (w\\_draft=0.5) & 60.00\\%" in tex
    names = {p.name for p in written}
    assert {"pareto_tiny_T1_gsm8k.png", "accept_position_tiny_T1_humaneval.png"} <= names
    assert all(p.stat().st_size > 1000 for p in written if p.suffix == ".png")


def test_missing_cell_is_refused_and_named(tmp_path):
    paper_runs(tmp_path / "sweep")
    m = json.loads((tmp_path / "sweep" / "dataset=humaneval" / "metrics.json").read_text())
    del m["methods"]["diversed"]
    (tmp_path / "sweep" / "dataset=humaneval" / "metrics.json").write_text(json.dumps(m))
    res = subprocess.run([sys.executable, "-m", "relaxspec.report", str(tmp_path / "sweep"), "--out",
                          str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("missing cell")]
    assert lines == ["missing cell: Table 1, T=1, pair tiny: row 'DIVERSED' x column 'humaneval'"]
    assert not (tmp_path / "out" / "table.md").exists()
    status, _ = report(tmp_path / "sweep", tmp_path / "out", allow_missing=True, plots=False)
    assert status == 0
    md = (tmp_path / "out" / "table.md").read_text()
    assert "| DIVERSED | **72.61%** | 67.0% [57.0, 77.0] | – | – |" in md


def test_cross_task_table3_and_temperatures(tmp_path):
    root = tmp_path / "sweep"
    for ds in ("gsm8k", "humaneval"):
        for tr in ("gsm8k", "humaneval"):
            make_run(root / f"train={tr},test={ds}", ds, {
                "sd": {"rule": "sd", "accept": 0.4, "quality": 0.5},
                "diversed": {"rule": "diversed", "accept": 0.8 if tr == ds else 0.6, "quality": 0.5,
                             "train_task": tr}}, temperature=0.1)
    status, _ = report(root, tmp_path / "out", plots=False)
    assert status == 0
    md = (tmp_path / "out" / "table.md").read_text()
    assert "### Table 3: cross-task transfer (train task / test task), T=0.1, pair tiny" in md
    assert "| DIVERSED (train: gsm8k) | **80.00%** | 50.0% [40.0, 60.0] | 60.00% | 50.0% [40.0, 60.0] |" in md
    assert "### Table 2, T=0.1, pair tiny" in md  # SD + in-task DIVERSED
    # a missing cross cell is refused
    import shutil

    shutil.rmtree(root / "train=humaneval,test=gsm8k")
    status, _ = report(root, tmp_path / "out2", plots=False)
    assert status == 1


def test_speedup_vs_draft_length_plot(tmp_path):
    for k in (2, 5):
        make_run(tmp_path / "s" / f"k={k}", "gsm8k", {"ar": {"rule": None, "accept": None, "quality": 0.5},
                                                      "sd": {"rule": "sd", "accept": 0.5, "quality": 0.5,
                                                             "speedup": 1.0 + k / 10}}, k=k)
    status, written = report(tmp_path / "s", tmp_path / "out")
    assert status == 0
    assert "speedup_vs_k_tiny_T1_gsm8k.png" in {p.name for p in written}
    assert "| SD k=2 |" in (tmp_path / "out" / "table.md").read_text()


def test_no_runs_is_an_error(tmp_path):
    assert report(tmp_path, tmp_path / "out")[0] == 2

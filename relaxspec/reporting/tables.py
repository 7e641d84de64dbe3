"""Paper-layout tables (Markdown and LaTeX) from result cells, refusing any missing cell.

* Tables 1-2 layout: one table per (pair, decode temperature); rows = methods (static ensembles per
  ``w_draft``; a ``k=``/``max_new=`` suffix when runs differ in draft length or budget), columns = datasets,
  each with ``Accept`` (acceptance rate) and the dataset's quality metric. T=1.0 is titled Table 1, T=0.1
  Table 2. DIVERSED cells whose head was trained on another task are left to Table 3.
* Table 3 layout (cross-task transfer), built when some DIVERSED cell's ``train_task`` differs from its
  dataset: rows = SD (when SD runs exist) and one ``DIVERSED (train: X)`` row per training task, columns =
  every test dataset a tagged DIVERSED head was evaluated on (so the full train x test grid is required).

Every row x column of a table must be filled; `build_tables` lists each hole as one ``missing cell: ...``
line. A cell found in two run dirs keeps the newest run (with a warning).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from relaxspec.reporting.runs import DATASETS, PERCENT_METRICS, Cell


@dataclass
class Table:
    title: str
    pair: str
    temperature: float
    kind: str  # main | cross
    columns: list[str]
    rows: list[str]
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)


def _col_order(ds: str) -> tuple[int, str]:
    keys = list(DATASETS)
    return (keys.index(ds) if ds in keys else len(keys), ds)


def _title(t: float, pair: str, n_pairs: int, kind: str) -> str:
    if kind == "cross":
        name = "Table 3: cross-task transfer (train task / test task)"
    elif abs(t - 1.0) < 1e-9:
        name = "Table 1"
    elif abs(t - 0.1) < 1e-9:
        name = "Table 2"
    else:
        name = "Table"
    return f"{name}, T={t:g}, pair {pair}"


def _put(table: Table, row: str, col: str, cell: Cell, warnings: list[str]) -> None:
    old = table.cells.get((row, col))
    if old is not None and old.run_dir != cell.run_dir:
        keep, drop = (cell, old) if cell.mtime >= old.mtime else (old, cell)
        msg = (f"duplicate result pair={cell.pair} T={cell.temperature:g} '{row}' x '{col}': {keep.run_dir} and"
               f" {drop.run_dir}; keeping the newer {keep.run_dir}")
        if msg not in warnings:
            warnings.append(msg)
        cell = keep
    table.cells[(row, col)] = cell


def build_tables(cells: list[Cell]) -> tuple[list[Table], list[str], list[str]]:
    """Tables, the missing-cell lines and the warnings."""
    groups: dict[tuple[str, float], list[Cell]] = defaultdict(list)
    for c in cells:
        groups[(c.pair, c.temperature)].append(c)
    n_pairs = len({c.pair for c in cells})
    tables: list[Table] = []
    warnings: list[str] = []
    for (pair, temp), group in sorted(groups.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        cross = [c for c in group if c.family == "diversed" and c.train_task and c.train_task != c.dataset]
        main = [c for c in group if c not in cross]
        if main:
            ks = {c.draft_length for c in main if c.family != "ar"}
            budgets = {c.max_new_tokens for c in main}

            def row_of(c: Cell, ks=ks, budgets=budgets) -> str:
                label = c.label
                if len(ks) > 1 and c.family != "ar":
                    label += f" k={c.draft_length}"
                if len(budgets) > 1:
                    label += f" max_new={c.max_new_tokens}"
                return label

            ordered = sorted(main, key=lambda c: (c.sort_key, c.draft_length, c.max_new_tokens or 0))
            t = Table(_title(temp, pair, n_pairs, "main"), pair, temp, "main",
                      sorted({c.dataset for c in main}, key=_col_order), list(dict.fromkeys(map(row_of, ordered))))
            for c in main:
                _put(t, row_of(c), c.dataset, c, warnings)
            tables.append(t)
        if cross:
            in_task = [c for c in group if c.family == "diversed" and c.train_task and c.train_task == c.dataset]
            diversed = cross + in_task
            cols = sorted({c.dataset for c in diversed}, key=_col_order)
            trains = sorted({c.train_task for c in diversed}, key=_col_order)
            sd = [c for c in group if c.family == "sd" and c.dataset in cols]
            rows = (["SD"] if sd else []) + [f"DIVERSED (train: {tr})" for tr in trains]
            t = Table(_title(temp, pair, n_pairs, "cross"), pair, temp, "cross", cols, rows)
            for c in sd:
                _put(t, "SD", c.dataset, c, warnings)
            for c in diversed:
                if c.dataset in cols:
                    _put(t, f"DIVERSED (train: {c.train_task})", c.dataset, c, warnings)
            tables.append(t)
    missing = [f"missing cell: {t.title}: row '{r}' x column '{col}'"
               for t in tables for r in t.rows for col in t.columns if (r, col) not in t.cells]
    return tables, missing, warnings


# ----------------------------------------------------------------------------------------- formatting


def fmt_accept(c: Cell | None) -> str:
    if c is None:
        return "–"
    return "n/a" if c.acceptance is None else f"{100 * c.acceptance:.2f}%"


def fmt_quality(c: Cell | None, ci: bool = False) -> str:
    if c is None or c.quality is None:
        return "–"
    pct = c.quality_metric in PERCENT_METRICS
    scale, unit, nd = (100.0, "%", 1) if pct else (1.0, "", 2)
    out = f"{scale * c.quality:.{nd}f}{unit}"
    lo, hi = c.quality_ci
    if ci and lo is not None and hi is not None:
        out += f" [{scale * lo:.{nd}f}, {scale * hi:.{nd}f}]"
    return out


def _quality_header(t: Table, ds: str) -> str:
    header = DATASETS.get(ds, (ds, None))[1]
    if header is None:
        metric = next((c.quality_metric for (r, col), c in t.cells.items() if col == ds and c.quality_metric), None)
        header = metric or "quality"
    return header


def _best_accept(t: Table, col: str) -> str | None:
    vals = [(c.acceptance, r) for (r, cc), c in t.cells.items() if cc == col and c.acceptance is not None]
    return max(vals)[1] if len(vals) > 1 else None


def table_markdown(t: Table) -> str:
    head = ["Method"] if t.kind == "main" else ["Train / Method"]
    for ds in t.columns:
        name = DATASETS.get(ds, (ds, ""))[0]
        head += [f"{name} Accept", f"{name} {_quality_header(t, ds)}"]
    lines = [f"### {t.title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    best = {col: _best_accept(t, col) for col in t.columns}
    for r in t.rows:
        row = [r]
        for col in t.columns:
            c = t.cells.get((r, col))
            acc = fmt_accept(c)
            row += [f"**{acc}**" if best[col] == r else acc, fmt_quality(c, ci=True)]
        lines.append("| " + " | ".join(row) + " |")
    n = sorted({c.n_samples for c in t.cells.values()})
    lines += ["", f"Accept = accepted / drafted tokens (ratio of sums); quality with a bootstrap 95% CI; "
                  f"examples per cell: {', '.join(map(str, n))}."]
    # speed: tau and speedup vs AR measured in the same process
    lines += ["", f"Speed ({t.title}): tau (tokens per target forward) / tok/s / speedup vs AR", "",
              "| Method | " + " | ".join(DATASETS.get(ds, (ds, ""))[0] for ds in t.columns) + " |",
              "|" + "---|" * (len(t.columns) + 1)]
    for r in t.rows:
        row = [r]
        for col in t.columns:
            c = t.cells.get((r, col))
            if c is None:
                row.append("–")
                continue
            tau = f"{c.tau:.2f}" if c.tau is not None else "–"
            tps = f"{c.tokens_per_second:.2f}" if c.tokens_per_second is not None and c.timing else "–"
            sp = f"{c.speedup:.2f}x" if c.speedup is not None and c.timing else "–"
            row.append(f"{tau} / {tps} / {sp}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _tex(s: str) -> str:
    return s.replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("%", "\\%").replace("&", "\\&")


def table_latex(t: Table) -> str:
    ncol = len(t.columns)
    spec = "l" + " cc" * ncol
    lines = ["\\begin{table}[t]", "\\centering", f"\\caption{{{_tex(t.title)}}}", f"\\begin{{tabular}}{{{spec}}}",
             "\\toprule"]
    groups = " & ".join(f"\\multicolumn{{2}}{{c}}{{{_tex(DATASETS.get(ds, (ds, ''))[0])}}}" for ds in t.columns)
    lines.append(f" & {groups} \\\\")
    lines.append(" ".join(f"\\cmidrule(lr){{{2 + 2 * i}-{3 + 2 * i}}}" for i in range(ncol)))
    sub = " & ".join(f"Accept & {_tex(_quality_header(t, ds))}" for ds in t.columns)
    lines.append(f"{'Method' if t.kind == 'main' else 'Train / Method'} & {sub} \\\\")
    lines.append("\\midrule")
    best = {col: _best_accept(t, col) for col in t.columns}
    for r in t.rows:
        vals = []
        for col in t.columns:
            c = t.cells.get((r, col))
            acc = _tex(fmt_accept(c))
            vals += [f"\\textbf{{{acc}}}" if best[col] == r else acc, _tex(fmt_quality(c))]
        lines.append(f"{_tex(r)} & " + " & ".join(vals) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
    return "\n".join(lines) + "\n"


def render(tables: list[Table], missing: list[str]) -> tuple[str, str]:
    """``(table.md, table.tex)`` contents."""
    md = ["# relaxspec results", ""]
    if missing:
        md += ["Missing cells (rendered as –):", ""] + [f"* {m}" for m in missing] + [""]
    tex = ["% relaxspec results; needs \\usepackage{booktabs}", ""]
    for t in tables:
        md.append(table_markdown(t))
        tex.append(table_latex(t))
    return "\n".join(md), "\n".join(tex)

"""Paper tables and figures from a run directory or a sweep directory.

    python -m relaxspec.report outputs/evaluate/multiruns/2026-01-01_12-00-00            # -> <dir>/report/
    python -m relaxspec.report outputs/sweeps/table1 --out paper/ --allow-missing

Reads every run dir below the path (a dir holding ``metrics.json`` + ``config.yaml``) and writes:

* ``table.md`` and ``table.tex``: Tables 1-2 (methods x datasets, Accept and quality per dataset, one table
  per pair and temperature) and, when DIVERSED heads were evaluated on other tasks than they were trained on,
  Table 3 (train task x test task); see `relaxspec.reporting.tables`;
* PNG plots: the static-weight Pareto plot with DIVERSED's point, acceptance per draft position, and speedup
  vs draft length when the runs differ in ``decode.draft_length``; see `relaxspec.reporting.plots`.

A table with a hole is refused: the command prints one ``missing cell: ...`` line per hole on stderr, writes
no table and exits with status 1, unless ``--allow-missing`` (holes are then printed as ``–``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from relaxspec.reporting.runs import find_run_dirs, load_all
from relaxspec.reporting.tables import build_tables, render


def report(path: str | Path, out: str | Path | None = None, allow_missing: bool = False,
           plots: bool = True) -> tuple[int, list[Path]]:
    """Write the tables and plots; returns ``(exit status, written files)``."""
    path = Path(path)
    out = Path(out) if out is not None else path / "report"
    if not path.exists():
        print(f"error: {path} does not exist", file=sys.stderr)
        return 2, []
    from relaxspec.distributed import failed_jobs

    failed = failed_jobs(path)
    for d, err in failed:
        print(f"failed job: {d}: {err}", file=sys.stderr)
    runs = find_run_dirs(path)
    if not runs:
        print(f"error: no run directories (metrics.json + config.yaml) under {path} ({len(failed)} failed job(s))",
              file=sys.stderr)
        return 2, []
    cells = load_all(path)
    tables, missing, warnings = build_tables(cells)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    if missing and not allow_missing:
        for m in missing:
            print(m, file=sys.stderr)
        print(f"error: {len(missing)} missing cell(s); no table written (--allow-missing prints them as –)",
              file=sys.stderr)
        return 1, []
    out.mkdir(parents=True, exist_ok=True)
    md, tex = render(tables, missing)
    (out / "table.md").write_text(md)
    (out / "table.tex").write_text(tex)
    written = [out / "table.md", out / "table.tex"]
    if plots:
        from relaxspec.reporting.plots import all_plots

        written += all_plots(cells, out)
    print(f"{len(runs)} run dir(s), {len(cells)} method result(s), {len(tables)} table(s)")
    return 0, written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m relaxspec.report", description=__doc__.split("\n")[0])
    ap.add_argument("path", help="a run directory or a sweep directory containing run directories")
    ap.add_argument("--out", default=None, help="output directory (default: <path>/report)")
    ap.add_argument("--allow-missing", action="store_true", help="print tables with holes (as –) instead of failing")
    ap.add_argument("--no-plots", action="store_true", help="tables only")
    args = ap.parse_args(argv)
    status, written = report(args.path, args.out, args.allow_missing, plots=not args.no_plots)
    for p in written:
        print(p)
    return status


if __name__ == "__main__":
    sys.exit(main())

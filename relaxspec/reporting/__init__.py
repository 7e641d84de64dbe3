"""Tables and figures as pure functions of run directories (see `relaxspec.report` for the CLI)."""

from relaxspec.reporting.runs import Cell, find_run_dirs, load_all
from relaxspec.reporting.tables import build_tables, render

__all__ = ["Cell", "build_tables", "find_run_dirs", "load_all", "render"]

"""Evaluation harness: `run(cfg)` is the body of evaluate.py."""

from relaxspec.evaluation.run import run

__all__ = ["run"]

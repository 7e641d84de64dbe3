"""Hooks of the local lm-eval tasks in this folder; the code lives in `relaxspec.lm_eval.tasks`."""

from relaxspec.lm_eval.tasks import gsm8k, humaneval, humaneval_process_results, toy, toy_ppl_process_results

__all__ = ["gsm8k", "humaneval", "humaneval_process_results", "toy", "toy_ppl_process_results"]

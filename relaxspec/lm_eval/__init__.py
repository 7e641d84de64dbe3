"""lm-evaluation-harness integration: the ``relaxspec`` model, its registration, local task helpers.

lm-eval 0.4.13 has no plugin discovery for external models: ``lm_eval.api.registry.get_model`` only knows
what ``lm_eval.models.MODEL_MAPPING`` lists and what was registered in-process with ``@register_model``.
relaxspec therefore declares the model in an entry-point group ``lm_eval.models`` (pyproject) and makes
it visible to lm-eval in one of two ways:

* ``relaxspec-lm-eval ...`` (or ``python -m relaxspec.lm_eval ...``): lm-eval's own CLI, same arguments,
  with the ``lm_eval.models`` entry points registered first. Needs nothing installed beyond relaxspec.
* the plain ``lm_eval`` / ``lm-eval`` command and ``lm_eval.simple_evaluate(model="relaxspec")``, after
  ``python -m relaxspec.lm_eval install-hook`` (run by ``make install``): it writes a one-line
  ``relaxspec_lm_eval.pth`` into site-packages that installs a tiny import hook; when ``lm_eval.models`` is
  imported, the hook registers every ``lm_eval.models`` entry point as a lazy placeholder (nothing heavy is
  imported at interpreter start; only relaxspec/__init__ and this package's hook module).

Module layout: `model` (``RelaxSpecLM``), `hook` (the import hook and its installer), `tasks` (dataset
loaders and the sandboxed HumanEval pass@1 used by the YAMLs in ``lm_eval_tasks/``).
"""

from __future__ import annotations

import sys

ENTRY_POINT_GROUP = "lm_eval.models"
MODEL_NAME = "relaxspec"
MODEL_TARGET = "relaxspec.lm_eval.model:RelaxSpecLM"


def register() -> None:
    """Register the ``lm_eval.models`` entry points (and ``relaxspec`` itself) with lm-eval's model registry."""
    from relaxspec.lm_eval.hook import register_entry_points

    register_entry_points()


HOOK_COMMANDS = {"install-hook": "install", "uninstall-hook": "uninstall", "hook-status": "status"}


def main(argv: list[str] | None = None) -> None:
    """``relaxspec-lm-eval``: lm-eval's CLI with the relaxspec model registered.

    ``relaxspec-lm-eval install-hook | uninstall-hook | hook-status`` manage the .pth hook instead.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in HOOK_COMMANDS:
        from relaxspec.lm_eval.hook import cli

        sys.exit(cli(HOOK_COMMANDS[args[0]]))
    register()
    from lm_eval.__main__ import cli_evaluate

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    cli_evaluate()

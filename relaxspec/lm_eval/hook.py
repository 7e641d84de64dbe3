"""The import hook that makes ``lm_eval --model relaxspec`` work, and its installer.

    python -m relaxspec.lm_eval install-hook     # write <site-packages>/relaxspec_lm_eval.pth
    python -m relaxspec.lm_eval hook-status      # is it installed, does lm-eval see the model?
    python -m relaxspec.lm_eval uninstall-hook

The ``.pth`` line runs `install` at interpreter start. `install` only appends a meta-path finder (no
lm_eval, torch or transformers import). When ``lm_eval.models`` is imported (lm-eval does so before its
first model lookup), the finder lets the normal import run and then registers every entry point of the
group ``lm_eval.models`` as a lazy ``"module:Class"`` placeholder, without overriding names lm-eval
already has. Any error inside the hook is swallowed: it can never break an unrelated program.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
import sysconfig
from pathlib import Path
from typing import Any

PTH_NAME = "relaxspec_lm_eval.pth"
PTH_LINE = ("import importlib.util as _u; _u.find_spec('relaxspec') is not None and "
            "__import__('relaxspec.lm_eval.hook', fromlist=['install']).install()\n")
_TARGET_MODULE = "lm_eval.models"


def register_entry_points() -> list[str]:
    """Register the ``lm_eval.models`` entry points with lm-eval's model registry; returns the new names."""
    from importlib.metadata import entry_points

    import lm_eval.models  # noqa: F401  (lm-eval's own models first: an empty registry is what makes
    from lm_eval.api.registry import model_registry  # get_model import them, so never register before them)

    from relaxspec.lm_eval import ENTRY_POINT_GROUP, MODEL_NAME, MODEL_TARGET

    targets = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    targets.setdefault(MODEL_NAME, MODEL_TARGET)  # an editable install whose metadata predates the group
    added = []
    for name, value in targets.items():
        if name not in model_registry:
            model_registry.register(name, target=value.replace(" ", ""))
            added.append(name)
    return added


class _Finder(importlib.abc.MetaPathFinder):
    """Runs `register_entry_points` right after ``lm_eval.models`` has been executed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None):
        if fullname != _TARGET_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            with contextlib.suppress(Exception):  # never break lm-eval (or anything else) over the plugin
                register_entry_points()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]  # this spec's own loader object
        return spec


def install() -> None:
    """Add the finder to ``sys.meta_path`` (idempotent); if lm_eval.models is already loaded, register now."""
    try:
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())
        if _TARGET_MODULE in sys.modules:
            register_entry_points()
    except Exception:
        pass


def pth_path() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / PTH_NAME


def cli(cmd: str) -> int:
    """``install``, ``uninstall`` or ``status`` of the .pth hook; returns the exit status."""
    path = pth_path()
    if cmd == "install":
        if not path.is_file() or path.read_text() != PTH_LINE:
            path.write_text(PTH_LINE)
        print(f"installed {path}")
        return 0
    if cmd == "uninstall":
        path.unlink(missing_ok=True)
        print(f"removed {path}")
        return 0
    if cmd == "status":
        from lm_eval.api.registry import get_model

        installed = path.is_file() and path.read_text() == PTH_LINE
        try:
            cls = get_model("relaxspec")
            seen = f"lm-eval resolves 'relaxspec' to {cls.__module__}.{cls.__name__}"
        except ValueError:
            seen = "lm-eval does not know 'relaxspec' in this process"
        print(f"{path}: {'installed' if installed else 'not installed'}; {seen}")
        return 0 if installed else 1
    print("usage: python -m relaxspec.lm_eval install-hook|uninstall-hook|hook-status", file=sys.stderr)
    return 2

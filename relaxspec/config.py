"""Typed config schemas, validation and the Hydra entry-point wrapper.

Every config group has a dataclass schema here. `validate(cfg)` merges each node of a composed config
into its schema (unknown keys and wrong types fail) and checks ranges and cross-field constraints
(negative temperature, an ASD run at T > 0, ...). `hydra_main` composes the config once before handing
over to Hydra, so a bad override, an unknown group option or an invalid value exits with ONE line
(`error: ...`) before any model is loaded.

Hyperparameter defaults live only in `conf/**.yaml`; the schemas use MISSING for values the YAML must set.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


class ConfigError(ValueError):
    """A config value is invalid. The message is one line, fit to print as the whole error."""


# ----------------------------------------------------------------------------------------- schemas


@dataclass
class ModelSpec:
    id: str = MISSING
    path: str | None = None
    revision: str | None = None
    dtype: str = "float32"
    backend: str = "auto"
    num_layers: int | None = None  # tiny pair only


@dataclass
class PairConfig:
    name: str = MISSING
    source: str = MISSING  # embedded | tiny | hf
    device: str = "cpu"
    draft: ModelSpec = field(default_factory=ModelSpec)
    target: ModelSpec = field(default_factory=ModelSpec)
    chat_template: bool = True
    system_prompt: str | None = None
    seed: int = 0
    hidden_size: int = 64
    init_std: float = 0.15


@dataclass
class DecodeConfig:
    temperature: float = MISSING
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int | None = None
    draft_length: int = 5
    batch_size: int = 1


@dataclass
class ARMethod:
    name: str = MISSING
    rule: str | None = None


@dataclass
class SDMethod:
    name: str = MISSING
    rule: str = "sd"


@dataclass
class LossyMethod:
    name: str = MISSING
    rule: str = "lossy"
    lenience: float = MISSING


@dataclass
class StaticEnsembleMethod:
    name: str = MISSING
    rule: str = "static_ensemble"
    w_draft: float = MISSING
    mix: str = "prob"
    exact_bonus: bool = True


@dataclass
class DiversedMethod:
    name: str = MISSING
    rule: str = "diversed"
    head: str | None = None
    mix: str = "prob"
    exact_bonus: bool = True


@dataclass
class CascadeMethod:
    name: str = MISSING
    rule: str = "cascade"
    deferral: str = MISSING
    alpha: float = MISSING
    exact_bonus: bool = True


@dataclass
class ASDMethod:
    name: str = MISSING
    rule: str = "asd"
    budget: float = MISSING
    gate: float = MISSING
    cap: int = MISSING
    value: str = "suffix"


METHOD_SCHEMAS: dict[str | None, type] = {
    None: ARMethod,
    "sd": SDMethod,
    "lossy": LossyMethod,
    "static_ensemble": StaticEnsembleMethod,
    "diversed": DiversedMethod,
    "cascade": CascadeMethod,
    "asd": ASDMethod,
}

PAIR_SOURCES = ("embedded", "tiny", "hf")
BACKENDS = ("auto", "eager", "onednn", "fp16w")
DTYPES = ("float32", "bfloat16", "float16")


def _fail(msg: str) -> None:
    raise ConfigError(msg)


def _typed(node: Any, schema: type, where: str) -> DictConfig:
    """Merge ``node`` into ``schema``: unknown keys and wrong types raise ConfigError (one line)."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
        OmegaConf.to_container(merged, throw_on_missing=True)
    except Exception as exc:  # omegaconf raises several error types; all mean "bad config"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        full_key = getattr(exc, "full_key", None)
        key = f"{where}.{full_key}" if full_key else where
        raise ConfigError(f"invalid config at {key}: {first}") from None
    return merged


def method_names() -> list[str]:
    """Names of the method configs shipped in ``conf/method``."""
    return sorted(p.stem for p in (CONF_DIR / "method").glob("*.yaml"))


def load_method(name: str) -> DictConfig:
    """Load ``conf/method/<name>.yaml`` (used for ``methods=[...]`` lists) and validate it."""
    path = CONF_DIR / "method" / f"{name}.yaml"
    if not path.is_file():
        _fail(f"unknown method '{name}' (available: {', '.join(method_names())})")
    return validate_method(OmegaConf.load(path))


def validate_method(node: Any) -> DictConfig:
    rule = node.get("rule") if isinstance(node, DictConfig | dict) else None
    if rule not in METHOD_SCHEMAS:
        _fail(f"method.rule '{rule}' is unknown (known rules: {', '.join(str(r) for r in METHOD_SCHEMAS)})")
    m = _typed(node, METHOD_SCHEMAS[rule], "method")
    if rule == "lossy" and not (0.0 < m.lenience <= 1.0):
        _fail(f"method.lenience must be in (0, 1], got {m.lenience}")
    if rule == "static_ensemble" and not (0.0 <= m.w_draft <= 1.0):
        _fail(f"method.w_draft must be in [0, 1], got {m.w_draft}")
    if rule in ("static_ensemble", "diversed") and m.mix not in ("prob", "logit"):
        _fail(f"method.mix must be 'prob' or 'logit', got '{m.mix}'")
    if rule == "cascade":
        if m.deferral not in ("opt", "token"):
            _fail(f"method.deferral must be 'opt' or 'token', got '{m.deferral}'")
        if not (0.0 <= m.alpha <= 1.0):
            _fail(f"method.alpha must be in [0, 1], got {m.alpha}")
    if rule == "asd":
        if not (math.isfinite(m.budget) and math.isfinite(m.gate)) or m.budget < 0 or m.gate < 0 or m.cap < 0:
            _fail(f"method budget/gate/cap must be finite and >= 0, got {m.budget}/{m.gate}/{m.cap}")
        if m.value not in ("suffix", "normalized_suffix"):
            _fail(f"method.value must be 'suffix' or 'normalized_suffix', got '{m.value}'")
    if rule == "diversed" and m.head is not None and not Path(m.head).exists():
        _fail(f"method.head '{m.head}' does not exist (a directory written by train.py)")
    return m


def validate_decode(node: Any) -> DictConfig:
    d = _typed(node, DecodeConfig, "decode")
    if not math.isfinite(d.temperature) or d.temperature < 0:
        _fail(f"decode.temperature must be a finite number >= 0 (0 = greedy), got {d.temperature}")
    if d.top_k < 0:
        _fail(f"decode.top_k must be >= 0 (0 = off), got {d.top_k}")
    if not (0.0 < d.top_p <= 1.0):
        _fail(f"decode.top_p must be in (0, 1], got {d.top_p}")
    if d.max_new_tokens is not None and d.max_new_tokens < 1:
        _fail(f"decode.max_new_tokens must be >= 1, got {d.max_new_tokens}")
    if d.draft_length < 1:
        _fail(f"decode.draft_length must be >= 1, got {d.draft_length}")
    if d.batch_size < 1:
        _fail(f"decode.batch_size must be >= 1, got {d.batch_size}")
    return d


def validate_pair(node: Any) -> DictConfig:
    p = _typed(node, PairConfig, "pair")
    if p.source not in PAIR_SOURCES:
        _fail(f"pair.source must be one of {PAIR_SOURCES}, got '{p.source}'")
    for role in ("draft", "target"):
        spec = p[role]
        if spec.backend not in BACKENDS:
            _fail(f"pair.{role}.backend must be one of {BACKENDS}, got '{spec.backend}'")
        if spec.dtype not in DTYPES:
            _fail(f"pair.{role}.dtype must be one of {DTYPES}, got '{spec.dtype}'")
        if spec.path is not None and not Path(spec.path).expanduser().exists():
            _fail(f"pair.{role}.path '{spec.path}' does not exist")
    return p


def validate(cfg: DictConfig) -> None:
    """Check a composed evaluate/train config. Raises ConfigError with a one-line message."""
    validate_pair(cfg.pair)
    decode = validate_decode(cfg.decode)
    names = cfg.get("methods")
    if names is None:
        methods = [validate_method(cfg.method)]
    else:
        if isinstance(names, str):
            names = [names]
        if len(names) == 0:
            _fail("methods must list at least one method")
        if len(set(names)) != len(names):
            _fail(f"methods has duplicates: {list(names)}")
        methods = [cfg.method if n == cfg.method.name else load_method(n) for n in names]
        methods = [validate_method(m) for m in methods]
    for m in methods:
        if m.rule == "asd" and decode.temperature != 0:
            _fail(f"method {m.name} (asd) is greedy only: set decode.temperature=0 (got {decode.temperature})")
    if cfg.get("draft") is not None:
        from relaxspec.propose.config import validate_draft

        try:
            validate_draft(cfg.draft)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if cfg.get("trainer") is not None:
        from relaxspec.training.config import validate_trainer

        validate_trainer(cfg.trainer)
    ds = cfg.dataset
    if ds.name == "smoke" and not ds.get("prompts"):
        _fail("dataset.prompts must list at least one prompt")
    if ds.get("limit") is not None and int(ds.limit) < 1:
        _fail(f"dataset.limit must be >= 1 or null, got {ds.limit}")


# ------------------------------------------------------------------------------------- entry point


def _one_line(exc: BaseException) -> str:
    """Collapse a multi-line Hydra/OmegaConf error (and its cause) into one readable line."""
    parts: list[str] = []
    options: list[str] = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        in_options = False
        for ln in (ln.strip() for ln in str(exc).splitlines()):
            if not ln or ln.startswith(("full_key", "object_type", "Set the environment", "provider=")):
                continue
            if ln.startswith("Config search path"):
                break
            if ln.startswith("Available options"):
                in_options = True
                parts.append(ln.rstrip(":") + ":")
            elif in_options and " " not in ln:
                options.append(ln)
            elif ln not in parts:
                parts.append(ln)
        exc = exc.__cause__ or exc.__context__
    text = " ".join(parts)
    if options:
        text += " " + ", ".join(options)
    return text or "invalid configuration"


def _is_sweep(overrides: list[str]) -> bool:
    """A multirun override: a comma outside [...] lists, or a sweep function."""
    plain = [re.sub(r"\[[^\]]*\]", "", o) for o in overrides]
    return any("," in o or "glob(" in o or "range(" in o or "choice(" in o for o in plain)


def precheck(config_name: str, argv: list[str], config_dir: Path = CONF_DIR) -> None:
    """Compose and validate the config for plain (non-sweep) overrides; exit(2) with one line if bad."""
    overrides = [a for a in argv if not a.startswith("-") and "=" in a]
    flags = [a for a in argv if a.startswith("-")]
    if any(f in ("-m", "--multirun", "--help", "-h", "--hydra-help", "--info", "-i") for f in flags):
        return  # sweeps are checked per job; help/info need no check
    if any(f.startswith(("-cd", "--config-dir", "-cn", "--config-name", "-cp", "--config-path")) for f in flags):
        return
    if _is_sweep(overrides):
        return
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=overrides)
        validate(cfg)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:  # Hydra/OmegaConf composition errors
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        sys.exit(2)
    finally:
        GlobalHydra.instance().clear()


def hydra_main(config_name: str, run: Callable[[DictConfig], Any]) -> Any:
    """Run ``run(cfg)`` under ``@hydra.main`` after a one-line-error precheck of the overrides."""
    import hydra

    os.environ.setdefault("PROJECT_ROOT", str(CONF_DIR.parent))
    for arg in list(sys.argv[1:]):  # the deepspeed launcher appends --local_rank=N, which Hydra rejects
        if arg.startswith("--local_rank"):
            os.environ.setdefault("LOCAL_RANK", arg.split("=", 1)[-1])
            sys.argv.remove(arg)
    precheck(config_name, sys.argv[1:])

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)
    def _main(cfg: DictConfig) -> Any:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        try:
            validate(cfg)
            return run(cfg)
        except user_errors() as exc:  # bad input found after composing: one line, no traceback
            print(f"error: {_one_line(exc)}", file=sys.stderr)
            if HydraConfig.get().mode == RunMode.RUN:
                sys.exit(2)
            if cfg.get("output_dir"):  # multirun: mark this job failed, let the sweep go on
                from relaxspec.distributed import mark_failed

                mark_failed(cfg.output_dir, exc)
                return None
            raise

    return _main()


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "bad input" (printed as one line), as opposed to bugs (full traceback)."""
    from relaxspec.models.assets import AssetError
    from relaxspec.models.pairs import PairError
    from relaxspec.models.weight_head import HeadMismatchError
    from relaxspec.tasks.data import DataNotFoundError

    return (ConfigError, PairError, HeadMismatchError, AssetError, DataNotFoundError)

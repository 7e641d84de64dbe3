"""Round-cost model C(L) for LibraSpec, read from a measured profile (``python -m relaxspec.profile``).

A profile holds median forward times after a realistic prefill: ``draft_ms[n-1]`` for a draft forward of n
tokens and ``target_ms[n-1]`` for a target forward of n tokens, per batch size. It is cached as JSON under
``$RELAXSPEC_CACHE/profiles/`` (default ``~/.cache/relaxspec/profiles/``), one file per
(pair name, draft backend, target backend, machine fingerprint).

Round cost with L proposed tokens:
* draft model (autoregressive): ``C(L) = (L + exact_bonus) * draft_ms[0] + target_ms[L]`` (L one-token draft
  forwards, the first one also consumes the pending token(s); then one target forward over L + 1 tokens);
* prompt lookup (parallel, no model): ``C(L) = target_ms[L]``.
Beyond the measured range the curves are extended linearly from their last two points.

Without a profile, ``load_cost_model(..., on_missing="fallback")`` returns the documented affine model
``target(n) = t_target_ms + (n - 1) * t_token_ms``, ``draft(n) = t_draft_ms + (n - 1) * t_token_ms * ratio``
from the config (with a warning); ``on_missing="error"`` raises ``FileNotFoundError`` naming the command to run.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = ["CostModel", "cache_dir", "load_cost_model", "machine_fingerprint", "pair_backends", "profile_path"]


def cache_dir() -> Path:
    """``$RELAXSPEC_CACHE/profiles`` or ``~/.cache/relaxspec/profiles``."""
    root = os.environ.get("RELAXSPEC_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "relaxspec"
    return base / "profiles"


def machine_fingerprint() -> tuple[str, dict[str, Any]]:
    """A short hash of what makes timings comparable: CPU/GPU model, core and thread counts, torch version."""
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    digest = hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest()[:12]
    return digest, info


def pair_backends(pair: Any) -> dict[str, str]:
    """Backends of a loaded pair (``pair.info``); ``default`` where the loader records none (tiny pair)."""
    info = getattr(pair, "info", {}) or {}
    return {role: str((info.get(role) or {}).get("backend") or "default") for role in ("draft", "target")}


def profile_path(pair: Any, fingerprint: str | None = None) -> Path:
    fp = fingerprint or machine_fingerprint()[0]
    b = pair_backends(pair)
    return cache_dir() / f"{pair.name}__{b['draft']}__{b['target']}__{fp}.json"


def _at(curve: list[float], n: int) -> float:
    """curve[n-1], extended linearly beyond its end."""
    if n <= len(curve):
        return float(curve[n - 1])
    if len(curve) == 1:
        return float(curve[0])
    slope = max(0.0, curve[-1] - curve[-2])
    return float(curve[-1] + slope * (n - len(curve)))


@dataclass
class CostModel:
    """Forward-time curves (ms) at one batch size and the round cost derived from them."""

    draft_ms: list[float]
    target_ms: list[float]
    source: str = "profile"
    meta: dict[str, Any] = field(default_factory=dict)

    def target(self, n: int) -> float:
        return _at(self.target_ms, n)

    def draft(self, n: int) -> float:
        return _at(self.draft_ms, n)

    def round_cost(self, L: int, proposer: str = "model", exact_bonus: bool = False) -> float:
        if proposer == "model":
            return (L + int(exact_bonus)) * self.draft(1) + self.target(L + 1)
        if proposer == "prompt_lookup":
            return self.target(L + 1)
        raise ValueError(f"unknown proposer {proposer!r}")

    def costs(self, l_max: int, proposer: str = "model", exact_bonus: bool = False) -> list[float]:
        """C(0..l_max)."""
        return [self.round_cost(L, proposer, exact_bonus) for L in range(l_max + 1)]

    @classmethod
    def affine(cls, t_target_ms: float, t_token_ms: float, t_draft_ms: float, n: int = 64) -> CostModel:
        ratio = t_draft_ms / t_target_ms if t_target_ms else 0.0
        return cls(draft_ms=[t_draft_ms + i * t_token_ms * ratio for i in range(n)],
                   target_ms=[t_target_ms + i * t_token_ms for i in range(n)], source="affine-fallback")

    @classmethod
    def from_profile(cls, path: str | Path, batch: int = 1) -> CostModel:
        data = json.loads(Path(path).read_text())
        curves = data["batches"]
        sizes = sorted(int(b) for b in curves)
        use = min(sizes, key=lambda s: (abs(s - batch), s))
        c = curves[str(use)]
        return cls(draft_ms=list(c["draft_ms"]), target_ms=list(c["target_ms"]), source=str(path),
                   meta={"batch": use, "fingerprint": data.get("fingerprint")})


def load_cost_model(pair: Any, cost_cfg: Any, batch: int = 1) -> CostModel:
    """The cost model of ``pair`` on this machine, as configured by ``draft.cost`` (see conf/draft/libraspec.yaml).

    ``cost_cfg.profile``: ``auto`` (the cached profile of this pair, backends and machine) or a JSON path.
    ``cost_cfg.on_missing``: ``fallback`` (affine model from ``cost_cfg.fallback``, with a warning) or ``error``.
    """
    get = cost_cfg.get if hasattr(cost_cfg, "get") else (lambda k, d=None: getattr(cost_cfg, k, d))
    where = get("profile", "auto") or "auto"
    path = profile_path(pair) if where == "auto" else Path(str(where)).expanduser()
    if path.is_file():
        return CostModel.from_profile(path, batch=batch)
    cmd = f"python -m relaxspec.profile pair={getattr(pair, 'name', '?')}"
    if get("on_missing", "fallback") == "error":
        raise FileNotFoundError(f"no cost profile at {path}; measure one with `{cmd}`")
    fb = get("fallback")
    fget = fb.get if hasattr(fb, "get") else (lambda k, d=None: getattr(fb, k, d))
    model = CostModel.affine(float(fget("t_target_ms")), float(fget("t_token_ms")), float(fget("t_draft_ms")))
    warnings.warn(f"libraspec: no cost profile at {path}; using the affine fallback cost model "
                  f"({dict(fb)}). Run `{cmd}` for a measured one.", stacklevel=2)
    return model

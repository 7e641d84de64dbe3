"""Scale-out helpers: rank/world of this process, the process group, example sharding, sweep-job markers.

Data-parallel evaluation (``torchrun --nproc_per_node N evaluate.py ...``): torchrun sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; `init_process_group` starts the group
(``gloo`` on CPU, ``nccl`` on GPU, each rank on ``cuda:LOCAL_RANK``). Example ``i`` goes to rank
``i % world`` (`shard`), so no example runs twice and none is missed. Without torchrun every helper
degrades to a single process (rank 0 of 1) and nothing is initialised.

The process-group timeout (how long rank 0 waits at the final barrier for the slowest rank) is
``$RELAXSPEC_DIST_TIMEOUT_MIN`` minutes (default 720).

Sweep jobs: `mark_failed` writes ``FAILED`` (one line: the error) and ``error.txt`` (the traceback) into a
job's run directory; `clear_failed` removes them when a rerun of that job succeeds; `failed_jobs` lists the
failed job directories below a sweep directory (used by ``python -m relaxspec.report``).
"""

from __future__ import annotations

import datetime
import os
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

FAILED_MARKER = "FAILED"
ERROR_FILE = "error.txt"


def rank() -> int:
    """Global rank of this process (``$RANK``, 0 without a launcher)."""
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """Number of processes (``$WORLD_SIZE``, 1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    """Rank on this node (``$LOCAL_RANK``; the deepspeed launcher's ``--local_rank`` ends up here too)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_distributed() -> bool:
    return world_size() > 1


def is_main() -> bool:
    """True on rank 0 (the only rank that merges results and logs to W&B)."""
    return rank() == 0


def _dist() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() else None


def initialized() -> bool:
    dist = _dist()
    return bool(dist is not None and dist.is_initialized())


def default_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def init_process_group(backend: str | None = None, timeout_min: float | None = None) -> bool:
    """Start the default process group when launched with WORLD_SIZE > 1; returns True if one is active.

    Idempotent. On GPU, selects ``cuda:LOCAL_RANK`` as this process's device first.
    """
    if not is_distributed():
        return False
    dist = _dist()
    if dist is None:
        raise RuntimeError("WORLD_SIZE > 1 but torch.distributed is not available in this torch build")
    if dist.is_initialized():
        return True
    import torch

    backend = backend or default_backend()
    if backend == "nccl":
        torch.cuda.set_device(local_rank())
    minutes = float(timeout_min if timeout_min is not None else os.environ.get("RELAXSPEC_DIST_TIMEOUT_MIN", 720))
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(minutes=minutes))
    return True


def barrier() -> None:
    """Wait for every rank (no-op without a process group)."""
    if not initialized():
        return
    dist = _dist()
    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[local_rank()])
    else:
        dist.barrier()


def broadcast_object(obj: T, src: int = 0) -> T:
    """``obj`` as held by rank ``src`` (identity without a process group)."""
    if not initialized():
        return obj
    box = [obj]
    _dist().broadcast_object_list(box, src=src)
    return box[0]


def destroy_process_group() -> None:
    if initialized():
        _dist().destroy_process_group()


def shard(items: Sequence[T], rank_: int | None = None, world: int | None = None) -> list[T]:
    """The items of one rank: item ``i`` goes to rank ``i % world``."""
    r = rank() if rank_ is None else rank_
    w = world_size() if world is None else world
    if not 0 <= r < w:
        raise ValueError(f"rank {r} is outside world size {w}")
    return list(items[r::w])


# ------------------------------------------------------------------------------- sweep-job markers


def mark_failed(out_dir: str | Path, exc: BaseException) -> Path:
    """Write ``FAILED`` (``<Type>: <message>``, one line) and ``error.txt`` (traceback) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    first = (str(exc).strip().splitlines() or [""])[0]
    (out / ERROR_FILE).write_text("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    (out / FAILED_MARKER).write_text(f"{type(exc).__name__}: {first}\n")
    return out / FAILED_MARKER


def clear_failed(out_dir: str | Path) -> None:
    """Remove the failure markers of a job that has now succeeded."""
    for name in (FAILED_MARKER, ERROR_FILE):
        (Path(out_dir) / name).unlink(missing_ok=True)


def failed_jobs(path: str | Path) -> list[tuple[Path, str]]:
    """``(job dir, one-line error)`` for every job directory at or below ``path`` holding a FAILED marker."""
    root = Path(path)
    found = [root / FAILED_MARKER] if (root / FAILED_MARKER).is_file() else []
    found += sorted(p for p in root.rglob(FAILED_MARKER) if p.is_file() and p.parent != root)
    return [(p.parent, p.read_text().strip()) for p in found]

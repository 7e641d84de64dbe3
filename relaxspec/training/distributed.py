"""Process-group setup for the DeepSpeed engine, with or without a launcher.

Under ``deepspeed --num_gpus N train.py ...`` or ``torchrun`` the launcher sets RANK / WORLD_SIZE / MASTER_*
(``relaxspec.config.hydra_main`` moves the launcher's ``--local_rank=N`` into LOCAL_RANK). A plain
``python train.py`` is a single process: we set RANK=0, LOCAL_RANK=0, WORLD_SIZE=1, MASTER_ADDR=127.0.0.1 and a
free MASTER_PORT ourselves (otherwise DeepSpeed falls back to MPI discovery and needs mpi4py). Without CUDA,
DS_ACCELERATOR=cpu and the gloo backend (the first init JIT-compiles DeepSpeed's shm op, about a minute, cached
in ~/.cache/torch_extensions).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch

__all__ = ["DistInfo", "all_mean", "init_distributed"]


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    backend: str
    launched: bool

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_distributed() -> DistInfo:
    """Set the env a launcher would have set (if none did) and initialise torch.distributed via DeepSpeed."""
    launched = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if not launched:
        os.environ["RANK"] = "0"
        os.environ["WORLD_SIZE"] = "1"
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(_free_port())  # ours alone: an inherited port may be in use
    cuda = torch.cuda.is_available()
    if not cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    backend = "nccl" if cuda else "gloo"
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend=backend)
    return DistInfo(rank=torch.distributed.get_rank(), local_rank=local_rank,
                    world_size=torch.distributed.get_world_size(), backend=backend, launched=launched)


def all_mean(value: float, device: torch.device) -> float:
    """Mean of a scalar over the ranks (the value itself for one process)."""
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        return float(value)
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return float(t.item()) / torch.distributed.get_world_size()

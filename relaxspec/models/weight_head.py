"""The DIVERSED ensemble weight head.

``Linear(d_draft + d_target -> 2)`` on the concatenated last-layer hidden states (draft first), softmax ->
``(w_draft, w_target)``. Equal init as in the reference release: one vector ~ N(0, init_std^2) copied into
both rows and a zero bias, so the head starts at exactly 0.5 / 0.5 whatever the input. The optional MLP
variant (``hidden`` set) zero-initialises its last layer, so it starts at 0.5 / 0.5 as well.

Always fp32 (about 12k parameters for Llama-1B/8B; the release's bf16 head without master weights is a
bug this avoids). Saved as ``head.safetensors`` + ``head.json`` (hidden sizes, model ids, mix space,
input layer); loading checks the hidden sizes against the pair.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from relaxspec.utils.io import atomic_write_text

WEIGHTS = "head.safetensors"
CONFIG = "head.json"


class HeadMismatchError(ValueError):
    """A head checkpoint does not fit the pair it is used with."""


class WeightHead(nn.Module):
    """Per-position ensemble weights from both models' last hidden states.

    Args:
        d_draft: draft hidden size.
        d_target: target hidden size.
        hidden: None for the paper's linear head, else the width of a small 2-layer MLP.
        init_std: std of the shared initial weight vector.
        meta: free-form metadata stored in head.json (model ids, mix space, ...).
    """

    def __init__(self, d_draft: int, d_target: int, *, hidden: int | None = None, init_std: float = 0.01,
                 meta: dict[str, Any] | None = None):
        super().__init__()
        self.d_draft, self.d_target, self.hidden = int(d_draft), int(d_target), hidden
        self.meta = dict(meta or {})
        d_in = self.d_draft + self.d_target
        if hidden is None:
            self.net = nn.Linear(d_in, 2)
            with torch.no_grad():
                v = torch.randn(d_in) * init_std
                self.net.weight.copy_(torch.stack([v, v]))
                self.net.bias.zero_()
        else:
            last = nn.Linear(hidden, 2)
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)
            self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), last)
        self.float()

    def logits(self, h_q: Tensor, h_p: Tensor) -> Tensor:
        """Two logits (draft, target) per position: ``[..., 2]``."""
        return self.net(torch.cat([h_q.float(), h_p.float()], dim=-1))

    def weights(self, h_q: Tensor, h_p: Tensor) -> Tensor:
        """``[..., 2]`` softmax weights: index 0 = w_draft, 1 = w_target."""
        return torch.softmax(self.logits(h_q, h_p), dim=-1)

    def forward(self, h_q: Tensor, h_p: Tensor) -> Tensor:
        """Target weight ``w_target[...]`` (what the verification rules take as ``w``)."""
        return self.weights(h_q, h_p)[..., 1]

    # ------------------------------------------------------------------------------ persistence

    def config(self) -> dict[str, Any]:
        return {"d_draft": self.d_draft, "d_target": self.d_target, "hidden": self.hidden,
                "format": "relaxspec.weight_head/1", **self.meta}

    def save(self, directory: str | Path) -> Path:
        """Write head.safetensors + head.json atomically (temp files + rename)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        os.close(fd)
        save_file(state, tmp)
        os.replace(tmp, directory / WEIGHTS)
        atomic_write_text(directory / CONFIG, json.dumps(self.config(), indent=2))
        return directory

    @classmethod
    def load(cls, directory: str | Path, *, d_draft: int | None = None, d_target: int | None = None) -> WeightHead:
        """Load a head; raise HeadMismatchError if its hidden sizes differ from the given ones."""
        directory = Path(directory)
        if not (directory / CONFIG).is_file() or not (directory / WEIGHTS).is_file():
            raise FileNotFoundError(f"no weight head in '{directory}' (expected {CONFIG} and {WEIGHTS})")
        cfg = json.loads((directory / CONFIG).read_text())
        for name, want in (("d_draft", d_draft), ("d_target", d_target)):
            if want is not None and int(cfg[name]) != int(want):
                raise HeadMismatchError(
                    f"head '{directory}' was trained for {name}={cfg[name]} but the pair has {name}={want}"
                )
        meta = {k: v for k, v in cfg.items() if k not in ("d_draft", "d_target", "hidden", "format")}
        head = cls(cfg["d_draft"], cfg["d_target"], hidden=cfg.get("hidden"), meta=meta)
        head.load_state_dict(load_file(str(directory / WEIGHTS)))
        return head


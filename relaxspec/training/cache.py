"""The pair cache: on-policy rollouts turned into per-token training features, stored as versioned shards.

For each rollout (prompt + completion sampled from the ensemble policy) one teacher-forced forward of each model
over prompt+completion gives, at every generated position t (the distribution that produced y_t):

* ``h_q``, ``h_p``: both models' last hidden states after the final norm (``model.get_decoder()(...)
  .last_hidden_state``), in the models' own dtype (what the decoding loop feeds the head);
* ``q_y``, ``p_y``: q_t(y_t), p_t(y_t); ``tv``: TV(p_t, q_t) over the full vocabulary (exact);
* truncated distributions for mix="logit": ``sup_ids`` = top-k(p) u top-k(q) (duplicates masked by
  ``sup_mask``), ``sup_p``, ``sup_q`` there, and the remaining masses ``rest_p``, ``rest_q``;

all from the *processed* training distributions (temperature, top-k, top-p as in decoding). Per sequence:
``reward`` and ``logpi_old`` (log pi of the collecting head). Token tensors are concatenated over the shard's
sequences; ``offsets[n_seq + 1]`` delimits them.

Layout: ``<dir>/manifest.json`` (format version, pair, model ids and revisions, chat template hash, sampling
knobs, truncation, head hash, shard list) and ``<dir>/shard_NNNNN.safetensors``. Shards and manifest are written
atomically (temp file + rename), the manifest after every shard, so a killed collection resumes at the first
missing shard. A manifest whose key differs (other pair, temperature, ...) is discarded with its shards.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from relaxspec.decoding.sampling import SamplingParams, probs
from relaxspec.utils.io import atomic_write_json

__all__ = [
    "CACHE_FORMAT",
    "RoundData",
    "chat_template_hash",
    "collect_shards",
    "load_round",
    "state_hash",
    "teacher_forced_features",
]

CACHE_FORMAT = "relaxspec.pair_cache/1"
MANIFEST = "manifest.json"
VOLATILE_KEYS = ("head_sha",)  # may differ for a complete cache reused by a resumed run


def chat_template_hash(tokenizer: Any) -> str:
    tmpl = getattr(tokenizer, "chat_template", None)
    text = tmpl if isinstance(tmpl, str) else json.dumps(tmpl, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def state_hash(state: dict[str, Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].detach().cpu().contiguous().float().numpy().tobytes())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------- features


@torch.no_grad()
def _hidden(model: Any, seqs: Sequence[Sequence[int]], device: torch.device) -> Tensor:
    """Last hidden states ``[B, L, d]`` of right-padded sequences (causal: padding never reaches real tokens)."""
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
    return model.get_decoder()(input_ids=ids.to(device)).last_hidden_state


@torch.no_grad()
def teacher_forced_features(
    draft: Any,
    target: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    params: SamplingParams,
    *,
    top_k_store: int = 64,
    batch_size: int = 4,
) -> dict[str, Tensor]:
    """Per-token features of ``completions`` (see the module docstring); all tensors on CPU."""
    if params.greedy:
        raise ValueError("the pair cache stores sampling distributions: temperature must be > 0")
    device = next(target.parameters()).device
    heads = (draft.get_output_embeddings(), target.get_output_embeddings())
    cols: dict[str, list[Tensor]] = {k: [] for k in ("h_q", "h_p", "p_y", "q_y", "tv", "tokens", "sup_ids", "sup_p",
                                                      "sup_q", "sup_mask", "rest_p", "rest_q")}
    lengths = []
    for start in range(0, len(prompts), batch_size):
        pr = prompts[start : start + batch_size]
        co = completions[start : start + batch_size]
        seqs = [list(p) + list(c) for p, c in zip(pr, co, strict=True)]
        hq_all = _hidden(draft, seqs, device)
        hp_all = _hidden(target, seqs, device)
        for i, (p_ids, c_ids) in enumerate(zip(pr, co, strict=True)):
            n, lp = len(c_ids), len(p_ids)
            lengths.append(n)
            if n == 0:
                continue
            hq, hp = hq_all[i, lp - 1 : lp - 1 + n], hp_all[i, lp - 1 : lp - 1 + n]
            q = probs(heads[0](hq.to(heads[0].weight.dtype)), params)
            p = probs(heads[1](hp.to(heads[1].weight.dtype)), params)
            vocab = min(p.shape[-1], q.shape[-1])
            if p.shape[-1] != vocab or q.shape[-1] != vocab:  # padded embedding rows, as in decoding
                p = p[..., :vocab] / p[..., :vocab].sum(-1, keepdim=True)
                q = q[..., :vocab] / q[..., :vocab].sum(-1, keepdim=True)
            y = torch.tensor(list(c_ids), dtype=torch.long, device=p.device)
            cols["h_q"].append(hq.cpu())
            cols["h_p"].append(hp.cpu())
            cols["tokens"].append(y.cpu())
            cols["p_y"].append(p.gather(1, y[:, None])[:, 0].cpu())
            cols["q_y"].append(q.gather(1, y[:, None])[:, 0].cpu())
            cols["tv"].append((0.5 * (p - q).abs().sum(-1)).clamp(0.0, 1.0).cpu())
            if top_k_store:
                kk = min(top_k_store, vocab)
                ids = torch.cat([torch.topk(p, kk, dim=-1).indices, torch.topk(q, kk, dim=-1).indices], dim=1)
                ids = torch.sort(ids, dim=1).values
                mask = torch.ones_like(ids, dtype=torch.bool)
                mask[:, 1:] = ids[:, 1:] != ids[:, :-1]
                sp, sq = p.gather(1, ids) * mask, q.gather(1, ids) * mask
                cols["sup_ids"].append(ids.to(torch.int32).cpu())
                cols["sup_p"].append(sp.cpu())
                cols["sup_q"].append(sq.cpu())
                cols["sup_mask"].append(mask.cpu())
                cols["rest_p"].append((1.0 - sp.sum(1)).clamp_min(0.0).cpu())
                cols["rest_q"].append((1.0 - sq.sum(1)).clamp_min(0.0).cpu())
            del p, q
    out = {k: torch.cat(v) for k, v in cols.items() if v}
    if not cols["h_q"]:  # every completion empty
        dq, dp = hq_all.shape[-1], hp_all.shape[-1]
        out.update(h_q=torch.zeros(0, dq, dtype=hq_all.dtype), h_p=torch.zeros(0, dp, dtype=hp_all.dtype),
                   p_y=torch.zeros(0), q_y=torch.zeros(0), tv=torch.zeros(0), tokens=torch.zeros(0, dtype=torch.long))
    out["offsets"] = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.long)
    return out


# ------------------------------------------------------------------------------------- shards


def _write_shard(path: Path, tensors: dict[str, Tensor], meta: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata={"meta": json.dumps(meta)})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_manifest(directory: Path) -> dict[str, Any] | None:
    path = directory / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _key_matches(manifest: dict[str, Any], key: dict[str, Any], trust_complete: bool) -> bool:
    if manifest.get("format") != CACHE_FORMAT:
        return False
    for k, v in key.items():
        if k in VOLATILE_KEYS and trust_complete and manifest.get("complete"):
            continue
        if json.dumps(manifest.get(k), sort_keys=True) != json.dumps(v, sort_keys=True):
            return False
    return True


def collect_shards(
    directory: str | Path,
    key: dict[str, Any],
    n_shards: int,
    make_shard: Callable[[int], tuple[dict[str, Tensor], dict[str, Any]]],
    *,
    trust_complete: bool = False,
    progress: bool = True,
    desc: str = "collect",
) -> dict[str, Any]:
    """Write shards ``0..n_shards-1`` with ``make_shard(i) -> (tensors, meta)``, skipping finished ones.

    Returns the final manifest. ``trust_complete`` reuses a complete cache even if its ``head_sha`` differs
    (a resumed run whose head moved after this round's rollouts were collected).
    """
    from tqdm.auto import tqdm

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(directory)
    if manifest is None or not _key_matches(manifest, key, trust_complete) or manifest.get("n_shards") != n_shards:
        for old in directory.glob("shard_*.safetensors"):
            old.unlink()
        manifest = {"format": CACHE_FORMAT, **key, "n_shards": n_shards, "complete": False, "shards": {}}
        atomic_write_json(directory / MANIFEST, manifest)
    todo = [i for i in range(n_shards)
            if f"shard_{i:05d}.safetensors" not in manifest["shards"]
            or not (directory / f"shard_{i:05d}.safetensors").is_file()]
    bar = tqdm(total=n_shards, initial=n_shards - len(todo), desc=desc, disable=not progress, leave=False)
    for i in todo:
        name = f"shard_{i:05d}.safetensors"
        tensors, meta = make_shard(i)
        _write_shard(directory / name, tensors, meta)
        manifest["shards"][name] = {k: v for k, v in meta.items() if k not in ("texts",)}
        atomic_write_json(directory / MANIFEST, manifest)
        bar.update(1)
    bar.close()
    if not manifest.get("complete"):
        manifest["complete"] = True
        atomic_write_json(directory / MANIFEST, manifest)
    return manifest


# ------------------------------------------------------------------------------------- loading


class RoundData:
    """All rollouts of one round (this rank's shards), concatenated; micro-batches by sequence index."""

    TOKEN_KEYS = ("h_q", "h_p", "p_y", "q_y", "tv", "sup_p", "sup_q", "sup_mask", "rest_p", "rest_q")
    SEQ_KEYS = ("reward", "logpi_old")

    def __init__(self, shards: list[dict[str, Tensor]]):
        self.tok: dict[str, Tensor] = {}
        self.seq: dict[str, Tensor] = {}
        offsets, base = [torch.zeros(1, dtype=torch.long)], 0
        for sh in shards:
            offsets.append(sh["offsets"][1:] + base)
            base += int(sh["offsets"][-1])
        self.offsets = torch.cat(offsets)
        for k in self.TOKEN_KEYS:
            if all(k in sh for sh in shards) and shards:
                self.tok[k] = torch.cat([sh[k] for sh in shards])
        for k in self.SEQ_KEYS:
            self.seq[k] = torch.cat([sh[k] for sh in shards]) if shards else torch.zeros(0)

    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    def batch(self, idx: Sequence[int], device: torch.device | str = "cpu") -> dict[str, Tensor]:
        """Tensors of the sequences ``idx`` (repeats allowed): token tensors, ``seq_id``, per-sequence tensors."""
        spans = [torch.arange(int(self.offsets[i]), int(self.offsets[i + 1])) for i in idx]
        tok_index = torch.cat(spans) if spans else torch.zeros(0, dtype=torch.long)
        seq_id = torch.cat([torch.full((len(s),), j, dtype=torch.long) for j, s in enumerate(spans)]) if spans \
            else torch.zeros(0, dtype=torch.long)
        out = {k: v[tok_index].to(device) for k, v in self.tok.items()}
        out["seq_id"] = seq_id.to(device)
        sel = torch.tensor(list(idx), dtype=torch.long)
        for k, v in self.seq.items():
            out[k] = v[sel].to(device)
        return out


def load_round(directory: str | Path) -> tuple[RoundData, dict[str, Any]]:
    """Load a complete round cache written by `collect_shards`."""
    directory = Path(directory)
    manifest = _read_manifest(directory)
    if manifest is None or not manifest.get("complete"):
        raise FileNotFoundError(f"no complete pair cache in '{directory}'")
    shards = []
    for i in range(int(manifest["n_shards"])):
        with safe_open(str(directory / f"shard_{i:05d}.safetensors"), framework="pt") as f:
            shards.append({k: f.get_tensor(k) for k in f.keys()})  # noqa: SIM118
    return RoundData(shards), manifest

"""The pair cache: teacher-forced features agree with the decoding loop's distributions; shards resume."""

from __future__ import annotations

import contextlib
import json

import torch

from relaxspec.decoding.lm import CausalLM
from relaxspec.decoding.sampling import SamplingParams, probs
from relaxspec.training.cache import RoundData, collect_shards, load_round, teacher_forced_features


def test_features_match_incremental_forward(tiny_pair):
    params = SamplingParams(0.8, top_k=50)
    prompts = [tiny_pair.render("hello there"), tiny_pair.render("a longer prompt, with more bytes")]
    completions = [[70, 71, 72], [80, 81]]
    f = teacher_forced_features(tiny_pair.draft, tiny_pair.target, prompts, completions, params, top_k_store=8,
                                batch_size=2)
    assert f["offsets"].tolist() == [0, 3, 5]
    assert f["h_q"].shape == (5, tiny_pair.draft.config.hidden_size)
    for role, model in (("q", tiny_pair.draft), ("p", tiny_pair.target)):
        lm = CausalLM(model)
        k = 0
        for pr, co in zip(prompts, completions, strict=True):
            st = lm.new_state(1)
            logits, hid = lm.forward(st, torch.tensor([pr]), keep=1)
            for tok in co:
                dist = probs(logits[:, -1], params)[0]
                assert abs(float(dist[tok]) - float(f[f"{role}_y"][k])) < 1e-4
                assert torch.allclose(hid[0, -1], f[f"h_{role}"][k], atol=1e-4)
                logits, hid = lm.forward(st, torch.tensor([[tok]]), keep=1)
                k += 1
    # TV is exact over the full vocabulary, the truncated support keeps masses consistent
    assert ((f["tv"] >= 0) & (f["tv"] <= 1)).all()
    total_p = (f["sup_p"]).sum(1) + f["rest_p"]
    assert torch.allclose(total_p, torch.ones_like(total_p), atol=1e-5)


class _Killed(Exception):
    pass


def _shard(i: int):
    t = {"offsets": torch.tensor([0, 2]), "h_q": torch.full((2, 3), float(i)), "h_p": torch.zeros(2, 4),
         "p_y": torch.rand(2), "q_y": torch.rand(2), "tv": torch.rand(2), "reward": torch.tensor([float(i)]),
         "logpi_old": torch.zeros(1)}
    return t, {"ids": [str(i)], "drafted": 0, "accepted": 0}


def test_collection_resumes_and_invalidates(tmp_path):
    made = []
    kill = [True]

    def make(i):
        made.append(i)
        if i == 2 and kill:
            kill.pop()
            raise _Killed  # killed while making shard 2
        return _shard(i)

    key = {"pair": "tiny", "sampling": {"temperature": 1.0}, "head_sha": "a"}
    with contextlib.suppress(_Killed):
        collect_shards(tmp_path, key, 4, make, progress=False)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert not manifest["complete"] and sorted(manifest["shards"]) == ["shard_00000.safetensors",
                                                                       "shard_00001.safetensors"]
    made.clear()
    collect_shards(tmp_path, key, 4, make, progress=False)
    assert made == [2, 3]  # finished shards are skipped
    data, manifest = load_round(tmp_path)
    assert isinstance(data, RoundData) and len(data) == 4 and data.n_tokens == 8
    assert manifest["format"] == "relaxspec.pair_cache/1" and manifest["complete"]
    b = data.batch([3, 1, 3])
    assert b["seq_id"].tolist() == [0, 0, 1, 1, 2, 2] and b["reward"].tolist() == [3.0, 1.0, 3.0]
    assert b["h_q"][:, 0].tolist() == [3.0, 3.0, 1.0, 1.0, 3.0, 3.0]
    # a complete cache from another head is reused only when trusted (resumed run); another key recollects
    made.clear()
    collect_shards(tmp_path, {**key, "head_sha": "b"}, 4, make, trust_complete=True, progress=False)
    assert made == []
    collect_shards(tmp_path, {**key, "sampling": {"temperature": 0.5}}, 4, make, progress=False)
    assert made == [0, 1, 2, 3]

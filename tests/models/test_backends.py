"""Tests for relaxspec.models.backends: numerics vs eager, memory release, fallbacks."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from torch import nn

from relaxspec.models import backends
from relaxspec.models.backends import BACKENDS, apply_backend, default_backend


def _tiny(tie: bool = False) -> transformers.Qwen2ForCausalLM:
    cfg = transformers.Qwen2Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=tie,
    )
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 512, (2, 24), generator=g)


@pytest.fixture(scope="module")
def eager_ref(ids):
    model = _tiny()
    with torch.no_grad():
        logits = model(ids).logits
        gen = model.generate(ids[:1], max_new_tokens=16, do_sample=False)
    return logits, gen


def _greedy(model, ids, n=16):
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=n, do_sample=False)


@pytest.mark.parametrize("kind, tol", [("onednn", 1e-4), ("fp16w", 2e-2)])
def test_backend_matches_eager(kind, tol, ids, eager_ref):
    ref_logits, ref_gen = eager_ref
    model = apply_backend(_tiny(), kind)
    assert model.relaxspec_backend == kind
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 2 * 7 + 1 and all(m.relaxspec_backend == kind for m in linears)
    with torch.no_grad():
        logits = model(ids).logits
    assert (logits - ref_logits).abs().max().item() < tol
    assert torch.equal(logits.argmax(-1), ref_logits.argmax(-1))
    if kind == "onednn":
        assert torch.equal(_greedy(model, ids[:1]), ref_gen)
    # HF lookups still work after the weights are freed
    assert model.device == torch.device("cpu") and model.dtype == torch.float32
    assert model.lm_head.weight.shape == (512, 64)
    assert sum(1 for _ in model.parameters()) == sum(1 for _ in _tiny().parameters())


def test_onednn_greedy_with_kv_cache_and_without_no_grad(ids, eager_ref):
    model = apply_backend(_tiny(), "onednn")
    out = model(ids).logits  # grad mode on: forward still works
    assert torch.allclose(out, eager_ref[0], atol=1e-4)
    assert torch.equal(_greedy(model, ids[:1]), eager_ref[1])


def test_fp16w_greedy_runs(ids, eager_ref):
    model = apply_backend(_tiny(), "fp16w")
    gen = _greedy(model, ids[:1])
    assert gen.shape == eager_ref[1].shape and torch.equal(gen[:, :24], ids[:1])


def test_weights_are_freed_but_shared_ones_kept():
    model = _tiny(tie=True)
    emb = model.get_input_embeddings().weight
    assert model.lm_head.weight is emb
    q_before = model.model.layers[0].self_attn.q_proj.weight.untyped_storage().nbytes()
    apply_backend(model, "onednn")
    q = model.model.layers[0].self_attn.q_proj.weight
    assert q.untyped_storage().nbytes() == 4 < q_before and q.shape == (64, 64) and not q.requires_grad
    assert torch.isnan(q).all()
    # the tied lm_head keeps (and shares) the embedding's real weight
    assert model.lm_head.weight is model.get_input_embeddings().weight is emb
    assert not torch.isnan(emb).any()
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()


def test_freeing_releases_memory():
    model = _tiny()
    del_refs = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    storages = [w.untyped_storage() for w in del_refs]
    n_bytes = sum(s.nbytes() for s in storages)
    apply_backend(model, "fp16w")
    live = sum(m.weight.untyped_storage().nbytes() for m in model.modules() if isinstance(m, nn.Linear))
    assert live < n_bytes / 1000
    del del_refs, storages
    gc.collect()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("kind", ["onednn", "fp16w"])
def test_safetensors_mapping_is_released(kind, tmp_path, ids, eager_ref):
    _tiny(tie=True).save_pretrained(tmp_path)
    weights = str(tmp_path / "model.safetensors")

    def mapped() -> bool:
        return weights in Path("/proc/self/maps").read_text()

    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    emb = model.get_input_embeddings().weight
    if not mapped():
        pytest.skip("this transformers version does not memory-map safetensors")
    apply_backend(model, kind)
    gc.collect()
    assert not mapped()
    assert model.lm_head.weight is emb is model.get_input_embeddings().weight  # identity/tie preserved
    with torch.no_grad():
        assert torch.isfinite(model(ids).logits).all()


def test_eager_is_noop_and_recorded(ids, eager_ref):
    model = _tiny()
    fwd = model.lm_head.forward
    assert apply_backend(model, "eager") is model
    assert model.relaxspec_backend == "eager" and model.lm_head.forward == fwd
    with torch.no_grad():
        assert torch.equal(model(ids).logits, eager_ref[0])


def test_unknown_kind_raises():
    with pytest.raises(ValueError, match="unknown backend 'int8'"):
        apply_backend(_tiny(), "int8")
    with pytest.raises(ValueError, match="unknown role"):
        default_backend("verifier", "cpu")


def test_reapply_same_is_noop_and_switching_raises():
    model = apply_backend(_tiny(), "onednn")
    assert apply_backend(model, "onednn") is model
    with pytest.raises(RuntimeError, match="reload the model"):
        apply_backend(model, "fp16w")


@pytest.mark.parametrize("kind", ["onednn", "fp16w"])
def test_missing_op_falls_back_to_eager(kind, monkeypatch, ids, eager_ref):
    def missing(k):
        raise AttributeError(f"'_OpNamespace' object has no attribute for {k}")

    monkeypatch.setattr(backends, "_resolve_ops", missing)
    model = _tiny()
    with pytest.warns(UserWarning, match=rf"backend '{kind}' unavailable .*falling back to 'eager'"):
        apply_backend(model, kind)
    assert model.relaxspec_backend == "eager"
    assert not any(hasattr(m, "relaxspec_backend") for m in model.modules() if isinstance(m, nn.Linear))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, eager_ref[0])


def test_packing_failure_leaves_model_untouched(monkeypatch, ids, eager_ref):
    real = backends._resolve_ops("onednn")
    calls = {"n": 0}

    def flaky(weight, bias):
        calls["n"] += 1
        if calls["n"] > 3:  # the probe and two real layers succeed, then a layer fails
            raise RuntimeError("mkldnn: out of memory")
        return real(weight, bias)

    monkeypatch.setattr(backends, "_resolve_ops", lambda kind: flaky)
    model = _tiny()
    with pytest.warns(UserWarning, match="packing failed"):
        apply_backend(model, "onednn")
    assert model.relaxspec_backend == "eager"
    with torch.no_grad():
        assert torch.equal(model(ids).logits, eager_ref[0])


def test_non_fp32_model_falls_back():
    model = _tiny().to(torch.bfloat16)
    with pytest.warns(UserWarning, match="need float32"):
        apply_backend(model, "fp16w")
    assert model.relaxspec_backend == "eager"


def test_default_backend():
    assert default_backend("target", "cpu") == "onednn"
    assert default_backend("draft", torch.device("cpu")) == "fp16w"
    assert default_backend("target", "cuda:0") == "eager"
    assert default_backend("draft", torch.device("cuda")) == "eager"
    assert set(BACKENDS) == {"eager", "onednn", "fp16w"}


def test_no_warning_on_supported_build():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_backend(_tiny(), "onednn")
        apply_backend(_tiny(), "fp16w")


# ------------------------------------------------------------------------------------------ real pair


@pytest.mark.real
@pytest.mark.parametrize("role, kind", [("target", "onednn"), ("draft", "fp16w")])
def test_real_pair_backend_greedy_matches_eager(role, kind):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from relaxspec.models.assets import ensure_embedded_pair

    path = ensure_embedded_pair()[role]
    tok = AutoTokenizer.from_pretrained(path)
    msgs = [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)[
        "input_ids"
    ]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ref = _greedy(model, ids)
    apply_backend(model, kind)
    assert model.relaxspec_backend == kind
    assert torch.equal(_greedy(model, ids), ref), tok.decode(ref[0, ids.shape[1] :])

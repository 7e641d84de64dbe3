"""CPU linear-layer backends: make k-token verify forwards cost about as much as a 1-token decode.

On the project's CPUs (AMD Zen 3, AVX2, no AVX-512) PyTorch's default fp32 ``F.linear`` goes through MKL, whose
small-M sgemm is 2-3x slower than its M=1 GEMV, so a 6-token verify forward costs ~3x a decode step. This module
swaps the forward of every ``nn.Linear`` (``lm_head`` included) for a pre-packed kernel (``docs/CPU-PERF.md``):

``eager``
    No change (MKL on CPU, cuBLAS on GPU). Reference numerics; the only kind that supports autograd.
``onednn``
    Exact fp32: the weight is reordered once into oneDNN's blocked layout
    (``torch.ops.mkldnn._reorder_linear_weight``) and applied with ``torch.ops.mkldnn._linear_pointwise``. Only the
    summation order changes (max |Δ| vs ``F.linear`` ≈ 4e-6 on a 1536x8960 layer), and the linears are
    batch-invariant (row i is bit-identical for every M). Qwen2.5-Coder-1.5B, 2 threads, after a 128-token prefill:
    T(1) ≈ 360-380 ms vs 440-505 ms for eager, v(6)=T(6)/T(1) ≈ 1.34-1.40 vs 2.5-3.1. Teacher-forced top-1 256/256
    and greedy-64 identical to eager fp32.
``fp16w``
    fbgemm fp16-weight GEMM (``torch.ops.quantized.linear_prepack_fp16`` + ``linear_dynamic_fp16``): weights are
    stored in fp16 (relative rounding error ≤ 2^-11), activations and accumulation stay fp32. Not bit-exact, but
    top-1 was identical to fp32 on 256 teacher-forced + 64 greedy tokens for both models. 1.5B T(1) ≈ 185 ms
    (2.4-2.7x faster than eager), 0.5B ≈ 82 ms; v(6) ≈ 1.3, but the kernel steps up at M=8 (v(8) ≈ 1.95), so keep
    verify blocks ≤ 7 tokens.

Own measurement (0.5B draft, 2 threads, after a 100-token prefill, median of 9 interleaved rounds on a shared
machine): T(1)/T(6) eager 123/250 ms (v(6)=2.03), ``onednn`` 42/52 ms (v(6)=1.25), ``fp16w`` 26/37 ms
(v(6)=1.40). The absolute numbers are ~3x below CPU-PERF.md's for the same model, so compare ratios, not ms,
across machines.

Recommended (:func:`default_backend`): on CPU the target uses ``onednn`` (exact fp32, so the verify semantics are
unchanged) and the draft uses ``fp16w`` (draft precision only moves the acceptance rate, never exactness), giving
c = T_draft(1)/T_target(1) ≈ 0.23 instead of ≈ 0.39 with eager for both. On GPU everything stays ``eager``.
Attention/SDPA is unchanged by any backend, so a chunked verify forward and step-by-step decode still differ at
the 1e-5 logit level, exactly as with eager.

Memory: packing makes a second copy of each weight (fp32 blocked for ``onednn``, fp16 for ``fp16w``), then the
original fp32 weight of every Linear that is not shared is freed: the Linear keeps a ``weight`` Parameter of the
right shape, dtype and device, but it is a zero-stride NaN view backed by a single element, so
``model.parameters()``, ``model.device`` / ``model.dtype`` and shape lookups keep working while the memory is
released. Weights shared with another module (an ``lm_head`` tied to the embedding, or any parameter that
appears twice) are kept and packed in addition. ``from_pretrained`` memory-maps the safetensors file, and the
mapping lives as long as any tensor views it, so the remaining parameters/buffers (embedding, norms, biases) are
copied into their own memory, which unmaps the file. Measured RSS (``/proc/self/status``) after
``from_pretrained`` + ``apply_backend`` + one forward, fresh process:

* Qwen2.5-Coder-1.5B (untied lm_head, 7.1 GB fp32): eager 6.4 GB (all file-backed mmap pages, i.e. page cache),
  ``onednn`` 7.3 GB (anonymous: 6.2 GB blocked Linear weights + 0.93 GB embedding), ``fp16w`` 4.3 GB.
  Transient peak while packing: the packed copies plus the file pages of the fp32 weights (≈ 13 GB for onednn).
* Qwen2.5-Coder-0.5B (untied lm_head, 2.5 GB fp32): eager 2.3 GB (file-backed), ``onednn`` 2.9 GB,
  ``fp16w`` 2.0 GB.
* Without the freeing, onednn would hold ≈ 13.5 GB (1.5B) and fp16w ≈ 11.4 GB.

Consequences: after a non-eager backend the model is inference-only (the packed ops have no autograd), its
``state_dict()`` no longer holds the Linear weights (do not save it; reload from disk instead), and the
backend cannot be changed without reloading. The packed kernels are internal, undocumented torch ops (those
inductor and ``quantize_dynamic(dtype=torch.float16)`` use), checked on torch 2.13.0; if one is missing (torch
built without mkldnn/fbgemm), the model is not an fp32 CPU model (CUDA, bf16, ...), or packing fails, the model is
left eager and a warning is issued. The applied kind is recorded as ``model.relaxspec_backend`` (and on each
packed Linear).
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable

import torch
from torch import nn

BACKENDS: tuple[str, ...] = ("eager", "onednn", "fp16w")
"""Valid ``kind`` values for :func:`apply_backend`."""

ROLES: tuple[str, ...] = ("draft", "target")

_Packer = Callable[[torch.Tensor, torch.Tensor | None], Callable[[torch.Tensor], torch.Tensor]]


class _OneDNNForward:
    """Forward of a Linear with a oneDNN-blocked fp32 weight (exact fp32 maths)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
        self.bias = None if bias is None else bias.detach().clone()  # own copy: see _release_file_mappings

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


class _FP16WeightForward:
    """Forward of a Linear with an fbgemm-packed fp16 weight (fp32 activations and accumulation)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.packed = torch.ops.quantized.linear_prepack_fp16(
            weight.detach(), None if bias is None else bias.detach().clone()
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic_fp16(x, self.packed)


def _resolve_ops(kind: str) -> _Packer:
    """Return the packer for ``kind``, raising if the torch build lacks the needed ops/engine."""
    if kind == "onednn":
        if not torch.backends.mkldnn.is_available():
            raise RuntimeError("torch was built without mkldnn/oneDNN")
        _ = torch.ops.mkldnn._reorder_linear_weight, torch.ops.mkldnn._linear_pointwise
        return _OneDNNForward
    if kind == "fp16w":
        if "fbgemm" not in torch.backends.quantized.supported_engines:
            raise RuntimeError("torch was built without the fbgemm quantized engine")
        _ = torch.ops.quantized.linear_prepack_fp16, torch.ops.quantized.linear_dynamic_fp16
        return _FP16WeightForward
    raise ValueError(kind)


def _probe(kind: str) -> _Packer:
    """Resolve the ops for ``kind`` and smoke-test them on a 3x2 layer with 3-D input."""
    packer = _resolve_ops(kind)
    w, b, x = torch.ones(3, 2), torch.zeros(3), torch.ones(1, 2, 2)
    y = packer(w, b)(x)
    if y.shape != (1, 2, 3) or not torch.allclose(y, torch.full_like(y, 2.0)):
        raise RuntimeError(f"{kind} smoke test returned wrong values")
    return packer


def _placeholder(w: torch.Tensor) -> torch.Tensor:
    """A NaN tensor with ``w``'s shape/dtype/device backed by one element (zero strides)."""
    return torch.full((), float("nan"), dtype=w.dtype, device=w.device).expand(w.shape)


def _release_file_mappings(model: nn.Module) -> None:
    """Give every remaining parameter and buffer its own memory (parameter identity and ties are preserved).

    ``from_pretrained`` memory-maps the safetensors file and every weight is a view into that one mapping; it is
    unmapped only when no tensor references it. Without this step the kept tensors (embedding, norms, biases)
    keep the whole mapping, so the pages of the freed Linear weights stay resident (as page cache, counted in
    RSS). Copying the small remainder releases the mapping.
    """
    seen: set[int] = set()
    for mod in model.modules():
        for p in mod._parameters.values():
            if p is None or id(p) in seen or 0 in p.stride():
                continue
            seen.add(id(p))
            p.data = p.data.clone()
        for name, b in list(mod._buffers.items()):
            if b is not None and id(b) not in seen:
                seen.add(id(b))
                mod._buffers[name] = b.clone()


def _fallback(model: nn.Module, kind: str, reason: str) -> nn.Module:
    warnings.warn(
        f"relaxspec: backend {kind!r} unavailable ({reason}); falling back to 'eager'", stacklevel=3
    )
    model.relaxspec_backend = "eager"
    return model


def apply_backend(model: nn.Module, kind: str) -> nn.Module:
    """Switch every ``nn.Linear`` of ``model`` (``lm_head`` included) to the CPU backend ``kind``, in place.

    Call it once, after loading (e.g. ``from_pretrained(path, dtype=torch.float32)``). The original fp32 weights
    of non-shared Linears are freed (see the module docstring); shared ones, such as an ``lm_head`` tied to the
    input embedding, are kept.

    Args:
        model: The model (typically a ``PreTrainedModel``). Must be fp32 on CPU for a non-eager kind.
        kind: One of :data:`BACKENDS`: ``"eager"``, ``"onednn"`` or ``"fp16w"``.

    Returns:
        The same ``model`` object, with ``model.relaxspec_backend`` set to the kind actually applied (``"eager"``
        after a fallback).

    Raises:
        ValueError: ``kind`` is unknown.
        RuntimeError: A different non-eager backend was already applied (reload the model to change it).

    Warns:
        UserWarning: The backend's ops are missing or fail, or the model is not fp32 on CPU; the model is then
            left eager.
    """
    if kind not in BACKENDS:
        raise ValueError(f"unknown backend {kind!r}; expected one of {', '.join(BACKENDS)}")
    current = getattr(model, "relaxspec_backend", "eager")
    if current == kind:
        model.relaxspec_backend = kind
        return model
    if current != "eager":
        raise RuntimeError(f"backend {current!r} already applied; reload the model to switch to {kind!r}")
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        model.relaxspec_backend = kind
        return model
    for name, m in linears:
        w = m.weight
        if w.device.type != "cpu":
            return _fallback(model, kind, f"{name} is on {w.device}; CPU backends need CPU tensors")
        if w.dtype != torch.float32:
            return _fallback(model, kind, f"{name} has dtype {w.dtype}; CPU backends need float32 weights")
    try:
        packer = _probe(kind)
    except (AttributeError, RuntimeError, NotImplementedError) as e:
        return _fallback(model, kind, f"{type(e).__name__}: {e}")

    # Parameters used in more than one place (tied lm_head/embedding, or shared between modules) stay alive.
    uses = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    get_emb = getattr(model, "get_input_embeddings", None)
    emb = get_emb() if callable(get_emb) else None
    if emb is not None and getattr(emb, "weight", None) is not None:
        uses[id(emb.weight)] += 1

    with torch.no_grad():
        try:  # pack everything first so that a failure leaves the model untouched
            packed = [packer(m.weight, m.bias) for _, m in linears]
        except (RuntimeError, NotImplementedError) as e:
            return _fallback(model, kind, f"packing failed: {type(e).__name__}: {e}")
        for (_, m), fwd in zip(linears, packed, strict=True):
            m.forward = fwd
            m.relaxspec_backend = kind
            if uses[id(m.weight)] <= 1:
                m.weight = nn.Parameter(_placeholder(m.weight), requires_grad=False)
        _release_file_mappings(model)
    model.relaxspec_backend = kind
    return model


def default_backend(role: str, device: str | torch.device) -> str:
    """Return the recommended backend for a model role on a device.

    Args:
        role: ``"draft"`` or ``"target"``.
        device: Where the model runs (``"cpu"``, ``"cuda:0"``, a ``torch.device``...).

    Returns:
        On CPU ``"onednn"`` for the target (exact fp32) and ``"fp16w"`` for the draft; ``"eager"`` elsewhere.

    Raises:
        ValueError: ``role`` is unknown.
    """
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    if torch.device(device).type != "cpu":
        return "eager"
    return "onednn" if role == "target" else "fp16w"

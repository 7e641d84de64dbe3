"""Load a draft/target pair: the embedded Qwen2.5-Coder pair, a tiny random pair, or any HF pair.

`load_pair(cfg.pair)` returns a `Pair` with both models in eval mode, one tokenizer, the EOS ids and
a record of what was loaded (ids, paths, revisions, dtypes, backends). It refuses pairs whose
tokenizers disagree, because speculative decoding compares token ids of the two models.

Sampling knobs never come from a model's `generation_config`: relaxspec's decoding loop reads only
`decode.*`, and `generation_config` is reset here so that `model.generate` (used in tests as a
reference) cannot silently apply a model's top_p/top_k either.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

log = logging.getLogger(__name__)

# ChatML, as in the Qwen2.5 instruct templates (without tool calls), for the tiny pair's tokenizer.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TINY_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>")


class PairError(RuntimeError):
    """The pair cannot be used (missing files, incompatible tokenizers, ...). One-line message."""


@dataclass
class Pair:
    """A loaded draft/target pair sharing one tokenizer."""

    name: str
    draft: PreTrainedModel
    target: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    eos_ids: list[int]
    chat_template: bool = True
    system_prompt: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def render(self, messages: list[dict[str, str]] | str) -> list[int]:
        """Token ids of a prompt: chat messages rendered with the chat template, or a raw string."""
        if isinstance(messages, str):
            return self.tokenizer(messages, add_special_tokens=False)["input_ids"]
        msgs = list(messages)
        if self.system_prompt and (not msgs or msgs[0]["role"] != "system"):
            msgs = [{"role": "system", "content": self.system_prompt}, *msgs]
        if not self.chat_template:
            text = "\n\n".join(m["content"] for m in msgs)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)

    @property
    def context_length(self) -> int:
        return int(getattr(self.target.config, "max_position_embeddings", 1 << 20))


# ------------------------------------------------------------------------------------------ tiny


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with no merges (256 byte tokens + ChatML specials), built in-process."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(TINY_SPECIAL_TOKENS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def tiny_models(vocab_size: int, *, hidden: int, target_layers: int, draft_layers: int, seed: int, init_std: float):
    """A random Qwen2 target and a layer-skip draft (its first layers + shared norm and head)."""

    def config(layers: int) -> Qwen2Config:
        return Qwen2Config(
            vocab_size=vocab_size,
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            initializer_range=init_std,
            tie_word_embeddings=False,
            eos_token_id=vocab_size - 1,
        )

    gen = torch.random.fork_rng()
    with gen:
        torch.manual_seed(seed)
        target = Qwen2ForCausalLM(config(target_layers)).eval()
    draft = Qwen2ForCausalLM(config(draft_layers)).eval()
    sd = {k: v for k, v in target.state_dict().items() if not k.startswith("model.layers.")}
    for i in range(draft_layers):
        prefix = f"model.layers.{i}."
        sd.update({k: v for k, v in target.state_dict().items() if k.startswith(prefix)})
    draft.load_state_dict(sd)
    return draft, target


# ------------------------------------------------------------------------------------------ load


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _neutral_generation_config(model: PreTrainedModel) -> None:
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    model.generation_config = GenerationConfig(
        eos_token_id=eos if eos is not None else model.config.eos_token_id,
        pad_token_id=model.config.eos_token_id if eos is None else (eos[0] if isinstance(eos, list) else eos),
    )


def check_tokenizers(draft_tok: PreTrainedTokenizerBase, target_tok: PreTrainedTokenizerBase, names: tuple) -> None:
    """Raise PairError unless both tokenizers have the same vocabulary and encode a probe identically."""
    vd, vt = draft_tok.get_vocab(), target_tok.get_vocab()
    if vd != vt:
        diff = len(set(vd.items()) ^ set(vt.items()))
        raise PairError(
            f"tokenizers of draft '{names[0]}' ({len(vd)} tokens) and target '{names[1]}' ({len(vt)} tokens) "
            f"differ in {diff} entries; speculative decoding needs a shared vocabulary"
        )
    probe = "def f(x):\n    return x ** 2  # héllo, 世界! 12,345.6"
    if draft_tok(probe)["input_ids"] != target_tok(probe)["input_ids"]:
        raise PairError(f"tokenizers of '{names[0]}' and '{names[1]}' encode the same text differently")


def _where(spec: Any) -> str:
    return str(Path(spec.path).expanduser()) if spec.path else spec.id


def _load_tokenizer(spec: Any) -> PreTrainedTokenizerBase:
    where = _where(spec)
    kwargs = {"revision": spec.revision} if spec.revision and not spec.path else {}
    try:
        return AutoTokenizer.from_pretrained(where, **kwargs)
    except Exception as exc:  # OSError, ValueError, JSON errors, ...: all mean "cannot use this path/id"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PairError(f"cannot load the tokenizer of '{where}': {first}") from None


def _load_model(spec: Any, device: torch.device) -> PreTrainedModel:
    """Load weights from safetensors only (a folder with only a pickled .bin is refused)."""
    where = _where(spec)
    kwargs: dict[str, Any] = {"dtype": _dtype(spec.dtype), "use_safetensors": True}
    if spec.revision and not spec.path:
        kwargs["revision"] = spec.revision
    try:
        model = AutoModelForCausalLM.from_pretrained(where, **kwargs)
    except Exception as exc:  # a truncated safetensors file raises SafetensorError, a missing one OSError
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PairError(f"cannot load the model '{where}': {first}") from None
    return model.to(device).eval()


def _apply_backend(model: PreTrainedModel, requested: str, role: str, device: torch.device) -> str:
    from relaxspec.models import backends

    kind = backends.default_backend(role, device) if requested == "auto" else requested
    backends.apply_backend(model, kind)
    return getattr(model, "relaxspec_backend", kind)


def load_pair(cfg: Any) -> Pair:
    """Load the pair described by a `pair` config node (see conf/pair/*.yaml)."""
    device = _device(cfg.device)
    info: dict[str, Any] = {"name": cfg.name, "source": cfg.source, "device": str(device)}
    if cfg.source == "tiny":
        tok = tiny_tokenizer()
        draft, target = tiny_models(
            len(tok),
            hidden=cfg.hidden_size,
            target_layers=cfg.target.num_layers or 3,
            draft_layers=cfg.draft.num_layers or 1,
            seed=cfg.seed,
            init_std=cfg.init_std,
        )
        draft, target = draft.to(device), target.to(device)
        info.update(draft={"id": "tiny", "layers": cfg.draft.num_layers}, target={"id": "tiny", "seed": cfg.seed})
    else:
        specs = {"draft": cfg.draft, "target": cfg.target}
        if cfg.source == "embedded":
            from relaxspec.models.assets import ensure_embedded_pair

            dirs = ensure_embedded_pair()
            specs = {
                role: {**_as_dict(spec), "path": spec.path or str(dirs[role])} for role, spec in specs.items()
            }
            specs = {role: _Obj(s) for role, s in specs.items()}
        # tokenizers first: an incompatible pair is refused before any weights are read
        draft_tok, tok = _load_tokenizer(specs["draft"]), _load_tokenizer(specs["target"])
        dwhere, twhere = _where(specs["draft"]), _where(specs["target"])
        check_tokenizers(draft_tok, tok, (dwhere, twhere))
        draft, target = _load_model(specs["draft"], device), _load_model(specs["target"], device)
        for role, where in (("draft", dwhere), ("target", twhere)):
            info[role] = {"id": specs[role].id, "path": where, "revision": specs[role].revision or _revision(where)}
        for role, model in (("draft", draft), ("target", target)):
            info[role]["backend"] = _apply_backend(model, specs[role].backend, role, device)
            info[role]["dtype"] = specs[role].dtype
    for model in (draft, target):
        model.requires_grad_(False)
        _neutral_generation_config(model)
    # End of generation: the tokenizer's EOS, the model's declared EOS ids and the known end-of-turn
    # tokens of the supported chat formats (ChatML, Llama-3).
    eos = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    gen_eos = target.generation_config.eos_token_id
    eos |= set(gen_eos if isinstance(gen_eos, list) else [] if gen_eos is None else [gen_eos])
    vocab = tok.get_vocab()
    eos |= {vocab[t] for t in END_OF_TURN_TOKENS if t in vocab}
    info["hidden_size"] = {"draft": hidden_size(draft), "target": hidden_size(target)}
    return Pair(
        name=cfg.name,
        draft=draft,
        target=target,
        tokenizer=tok,
        eos_ids=sorted(eos),
        chat_template=cfg.chat_template,
        system_prompt=cfg.system_prompt,
        info=info,
    )


def hidden_size(model: PreTrainedModel) -> int:
    """Last-layer hidden size (Gemma-3 keeps it in text_config)."""
    cfg = model.config
    return int(getattr(cfg, "hidden_size", None) or cfg.text_config.hidden_size)


def _revision(where: str) -> str | None:
    marker = Path(where) / "relaxspec_ok.json"
    if marker.is_file():
        try:
            return json.loads(marker.read_text()).get("gguf_sha256")
        except (OSError, ValueError):
            return None
    return None


def _as_dict(spec: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(spec) if not isinstance(spec, dict) else dict(spec)


class _Obj:
    def __init__(self, d: dict[str, Any]):
        self.__dict__.update(d)

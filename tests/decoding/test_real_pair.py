"""The embedded real pair (Qwen2.5-Coder 0.5B draft / 1.5B target): tokenizers agree, our AR equals
`model.generate`, and greedy SD equals target greedy decoding token for token."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from relaxspec.decoding.generate import StopChecker, generate_ar, generate_speculative
from relaxspec.decoding.lm import CausalLM
from relaxspec.decoding.sampling import SamplingParams
from relaxspec.verify import get_rule

pytestmark = pytest.mark.real

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "def fibonacci(n):",
]


def test_tokenizers_encode_identically(real_pair):
    draft_tok = AutoTokenizer.from_pretrained(real_pair.info["draft"]["path"])
    text = "def f(x):\n    return [i ** 2 for i in range(x)]  # 你好, ünïcödé 12,345.6 <|im_end|>"
    assert draft_tok(text)["input_ids"] == real_pair.tokenizer(text)["input_ids"]
    assert draft_tok.get_vocab() == real_pair.tokenizer.get_vocab()


def test_greedy_ar_equals_generate_and_sd_equals_ar(real_pair):
    target, draft = CausalLM(real_pair.target), CausalLM(real_pair.draft)
    stop = StopChecker(real_pair.eos_ids)
    greedy = SamplingParams(0.0)
    prompts = [real_pair.render([{"role": "user", "content": p}]) for p in PROMPTS[:2]]
    prompts.append(real_pair.render(PROMPTS[2]))  # raw completion prompt
    n_new = 24
    ar = [generate_ar(target, [p], params=greedy, max_new_tokens=[n_new], stopper=stop)[0] for p in prompts]
    for p, out in zip(prompts, ar, strict=True):
        ref = real_pair.target.generate(torch.tensor([p]), max_new_tokens=n_new, do_sample=False,
                                        eos_token_id=real_pair.eos_ids, pad_token_id=real_pair.eos_ids[0])
        assert out.tokens == ref[0, len(p):].tolist()
    sd = generate_speculative(draft, target, prompts, params=greedy, max_new_tokens=[n_new] * len(prompts),
                              stopper=stop, rule=get_rule("sd"), k=5)
    assert [o.tokens for o in sd] == [o.tokens for o in ar]
    calls = sum(o.stats.target_calls for o in sd)
    assert sum(o.stats.new_tokens for o in sd) / calls > 1.0
    text = real_pair.tokenizer.decode(ar[0].tokens, skip_special_tokens=True)
    assert "def" in text or "prime" in text.lower()

"""The decoding loop: AR equals HF generate, greedy SD equals AR, caches roll back exactly, and
sampled SD reproduces the target's distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from relaxspec.decoding.generate import StopChecker, generate_ar, generate_speculative
from relaxspec.decoding.lm import CausalLM
from relaxspec.decoding.sampling import SamplingParams
from relaxspec.models.weight_head import WeightHead
from relaxspec.verify import get_rule

GREEDY = SamplingParams(0.0)
PROMPTS = ["hello there", "write some code please", "x", "a much longer prompt about speculative decoding!"]


def _prompts(pair, n=4):
    return [pair.render([{"role": "user", "content": c}]) for c in PROMPTS[:n]]


def test_ar_equals_hf_generate(tiny_pair):
    target = CausalLM(tiny_pair.target)
    for p in _prompts(tiny_pair):
        ours = generate_ar(target, [p], params=GREEDY, max_new_tokens=[24], stopper=StopChecker(tiny_pair.eos_ids))
        ref = tiny_pair.target.generate(torch.tensor([p]), max_new_tokens=24, do_sample=False,
                                        eos_token_id=tiny_pair.eos_ids, pad_token_id=tiny_pair.eos_ids[0])
        ref_tokens = ref[0, len(p):].tolist()
        assert ours[0].tokens == ref_tokens


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_sd_equals_ar(tiny_pair, batch, k):
    target, draft = CausalLM(tiny_pair.target), CausalLM(tiny_pair.draft)
    prompts = _prompts(tiny_pair, batch)
    stop = StopChecker(tiny_pair.eos_ids)
    ar = [generate_ar(target, [p], params=GREEDY, max_new_tokens=[40], stopper=stop)[0].tokens for p in prompts]
    sd = generate_speculative(draft, target, prompts, params=GREEDY, max_new_tokens=[40] * batch, stopper=stop,
                              rule=get_rule("sd"), k=k)
    assert [o.tokens for o in sd] == ar
    for o in sd:
        s = o.stats
        assert s.target_calls == s.rounds and s.drafted == k * s.rounds
        assert s.new_tokens <= s.accepted + s.rounds


@pytest.mark.parametrize("exact_bonus", [False, True])
def test_caches_hold_exactly_the_committed_tokens(tiny_pair, exact_bonus):
    target, draft = CausalLM(tiny_pair.target), CausalLM(tiny_pair.draft)
    prompts = _prompts(tiny_pair, 4)
    k, max_new = 4, 30
    seen = []

    def check(r):
        t_len, d_len = r["tstate"].lengths.tolist(), r["dstate"].lengths.tolist()
        for pos, rid in enumerate(r["rows"]):
            toks = r["tokens"][pos]
            if len(toks) >= max_new:
                continue
            committed = len(prompts[rid]) + len(toks)
            assert t_len[pos] == committed - 1  # all but the last committed token
            unfed = 2 if (int(r["n"][pos]) == k and not exact_bonus) else 1
            assert d_len[pos] == committed - unfed
        if len(r["rows"]) == 1:  # batch size 1: no holes, the cache length itself is exact
            assert r["tstate"].cache.get_seq_length() == t_len[0]
            assert r["dstate"].cache.get_seq_length() == d_len[0]
        seen.append(len(r["rows"]))

    generate_speculative(draft, target, prompts, params=SamplingParams(1.0), max_new_tokens=[max_new] * 4,
                         stopper=StopChecker([]), rule=get_rule("sd"), k=k, exact_bonus=exact_bonus,
                         generator=torch.Generator().manual_seed(0), on_round=check)
    generate_speculative(draft, target, prompts[:1], params=SamplingParams(1.0), max_new_tokens=[max_new],
                         stopper=StopChecker([]), rule=get_rule("sd"), k=k, exact_bonus=exact_bonus,
                         generator=torch.Generator().manual_seed(1), on_round=check)
    assert seen


def _first_two_token_law(model, prompt):
    """Exact target distribution of the first token and the marginal of the second token."""
    with torch.no_grad():
        p1 = torch.softmax(model(torch.tensor([prompt])).logits[0, -1].double(), -1)
        vocab = p1.shape[0]
        seqs = torch.cat([torch.tensor(prompt).repeat(vocab, 1), torch.arange(vocab)[:, None]], dim=1)
        p2 = torch.softmax(model(seqs).logits[:, -1].double(), -1)
    return p1.numpy(), (p1[:, None] * p2).sum(0).numpy()


def _chi2(samples, probs, top=12):
    order = np.argsort(-probs)[:top]
    counts = np.bincount(samples, minlength=probs.shape[0])
    obs = np.append(counts[order], counts.sum() - counts[order].sum())
    exp = np.append(probs[order], 1 - probs[order].sum()) * counts.sum()
    return chisquare(obs, exp).pvalue


@pytest.mark.parametrize("rule,kwargs,exact_bonus", [("sd", {}, False), ("static_ensemble",
                         {"w_target": 1.0, "mix": "prob"}, True)])
def test_sampled_sd_reproduces_target_distribution(tiny_pair, rule, kwargs, exact_bonus):
    """T=1: the first two generated tokens follow the target's law (chi-square, alpha = 1e-3)."""
    target, draft = CausalLM(tiny_pair.target), CausalLM(tiny_pair.draft)
    prompt = _prompts(tiny_pair, 1)[0]
    n = 6000
    outs = generate_speculative(draft, target, [prompt] * n, params=SamplingParams(1.0), max_new_tokens=[2] * n,
                                stopper=StopChecker([]), rule=get_rule(rule), rule_kwargs=kwargs, k=3,
                                exact_bonus=exact_bonus, generator=torch.Generator().manual_seed(123))
    t1 = np.array([o.tokens[0] for o in outs])
    t2 = np.array([o.tokens[1] for o in outs])
    p1, p2 = _first_two_token_law(tiny_pair.target, prompt)
    assert _chi2(t1, p1) > 1e-3
    assert _chi2(t2, p2) > 1e-3
    # and the test has power: the draft's own first-token law is rejected
    q1, _ = _first_two_token_law(tiny_pair.draft, prompt)
    assert _chi2(t1, q1) < 1e-3


def test_untrained_diversed_head_runs_in_the_loop(tiny_pair):
    target, draft = CausalLM(tiny_pair.target), CausalLM(tiny_pair.draft)
    head = WeightHead(64, 64)
    seen_w = []
    outs = generate_speculative(draft, target, _prompts(tiny_pair, 2), params=SamplingParams(1.0),
                                max_new_tokens=[20, 20], stopper=StopChecker([]), rule=get_rule("diversed"),
                                rule_kwargs={"mix": "prob"}, k=3, head=head, exact_bonus=True,
                                generator=torch.Generator().manual_seed(0),
                                on_round=lambda r: seen_w.append(r["w"]))
    assert all(len(o.tokens) == 20 for o in outs)
    assert all(torch.allclose(w, torch.full_like(w, 0.5)) for w in seen_w)
    assert outs[0].stats.w_target_count > 0


def test_stop_strings_and_eos_cut_rows(tiny_pair):
    target, draft = CausalLM(tiny_pair.target), CausalLM(tiny_pair.draft)
    prompts = _prompts(tiny_pair, 2)
    free = generate_ar(target, prompts, params=GREEDY, max_new_tokens=[30, 30], stopper=StopChecker([]))
    stop_tok = free[0].tokens[5]
    cut = generate_speculative(draft, target, prompts, params=GREEDY, max_new_tokens=[30, 30],
                               stopper=StopChecker([stop_tok]), rule=get_rule("sd"), k=4)
    assert cut[0].tokens == free[0].tokens[: free[0].tokens.index(stop_tok) + 1]
    assert cut[0].finish_reason == "eos"
    text = tiny_pair.tokenizer.decode(free[1].tokens[:8], skip_special_tokens=True)
    stop_str = text[-2:]
    cut = generate_speculative(draft, target, prompts[1:], params=GREEDY, max_new_tokens=[30], rule=get_rule("sd"),
                               stopper=StopChecker([], [stop_str], tiny_pair.tokenizer), k=4)
    assert cut[0].finish_reason == "stop"
    assert stop_str in tiny_pair.tokenizer.decode(cut[0].tokens, skip_special_tokens=True)
    assert len(cut[0].tokens) <= 8


def test_row_by_row_prefill_equals_the_padded_batch(tiny_pair):
    """CPU prefill: each row alone, caches left-padded afterwards == one left-padded batch forward."""
    lm = CausalLM(tiny_pair.target)
    rows = [p[:-1] for p in _prompts(tiny_pair, 4)] + [[]]  # different lengths and an all-padding row
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :], valid[i, width - len(r) :] = torch.tensor(r), True
    padded, per_row = lm.new_state(len(rows)), lm.new_state(len(rows))
    lm.forward(padded, ids, valid, keep=0)
    lm.prefill_rows(per_row, rows)
    assert torch.equal(padded.valid, per_row.valid) and per_row.cache.get_seq_length() == width
    for a, b in zip(padded.cache.layers, per_row.cache.layers, strict=True):
        m = padded.valid[:, None, :, None]
        torch.testing.assert_close(a.keys * m, b.keys * m, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(a.values * m, b.values * m, atol=1e-5, rtol=1e-4)
    nxt = torch.tensor([[3], [4], [5], [6], [7]])
    la, _ = lm.forward(padded, nxt)
    lb, _ = lm.forward(per_row, nxt)
    torch.testing.assert_close(la, lb, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="empty cache"):
        lm.prefill_rows(per_row, rows)

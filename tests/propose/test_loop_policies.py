"""Every draft-length policy (and the prompt-lookup proposer) inside the decoding loop on the tiny pair:
greedy SD equals AR token for token, caches stay exact with ragged lengths, sampled SD keeps the target law."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from relaxspec.decoding.generate import StopChecker, generate_ar, generate_speculative
from relaxspec.decoding.lm import CausalLM
from relaxspec.decoding.sampling import SamplingParams
from relaxspec.propose import (
    ConfidencePolicy,
    ConstantPolicy,
    EntropyPolicy,
    HeuristicPolicy,
    LibraSpecPolicy,
    PromptLookup,
)
from relaxspec.verify import get_rule

GREEDY = SamplingParams(0.0)
PROMPTS = ["hello there", "write some code please", "x", "a much longer prompt about speculative decoding!"]

# The tiny draft is nearly uniform (max q ~ 0.05-0.1, H(q) ~ 4.8 nats), so thresholds are set where the
# policies actually vary the length between rows and rounds.
POLICIES = {
    "constant": lambda: (ConstantPolicy(3), None),
    "heuristic": lambda: (HeuristicPolicy(initial=2, max_len=6), None),
    "confidence": lambda: (ConfidencePolicy(threshold=0.06, max_len=6, adapt=True, min_samples=3), None),
    "entropy": lambda: (EntropyPolicy(h=0.85, max_len=6), None),
    "libraspec": lambda: (LibraSpecPolicy([1.0 + 3e-4 * L for L in range(7)], max_len=6), None),
    "lookup_constant": lambda: (ConstantPolicy(4), PromptLookup()),
    "lookup_libraspec": lambda: (LibraSpecPolicy([1.0 + 0.05 * L for L in range(9)], max_len=8), PromptLookup()),
}


def _prompts(pair, n=4):
    return [pair.render([{"role": "user", "content": c}]) for c in PROMPTS[:n]]


@pytest.fixture(scope="module")
def lms(tiny_pair):
    return CausalLM(tiny_pair.target), CausalLM(tiny_pair.draft)


@pytest.fixture(scope="module")
def ar_ref(tiny_pair, lms):
    stop = StopChecker(tiny_pair.eos_ids)
    return [generate_ar(lms[0], [p], params=GREEDY, max_new_tokens=[40], stopper=stop)[0].tokens
            for p in _prompts(tiny_pair)]


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("name", list(POLICIES))
def test_greedy_sd_with_policy_equals_ar(tiny_pair, lms, ar_ref, name, batch):
    target, draft = lms
    policy, lookup = POLICIES[name]()
    lengths = []
    outs = generate_speculative(draft, target, _prompts(tiny_pair, batch), params=GREEDY,
                                max_new_tokens=[40] * batch, stopper=StopChecker(tiny_pair.eos_ids),
                                rule=get_rule("sd"), policy=policy, lookup=lookup,
                                on_round=lambda r: lengths.append(r["lengths"].tolist()))
    assert [o.tokens for o in outs] == ar_ref[:batch]
    flat = [x for row in lengths for x in row]
    assert all(1 <= x <= policy.max_len for x in flat)
    for o in outs:
        s = o.stats
        assert s.target_calls == s.rounds and s.new_tokens <= s.accepted + s.rounds
        assert s.drafted == sum(s.drafted_at_position) and s.accepted == sum(s.accept_at_position)
        if lookup is not None:
            assert s.draft_calls == 0
    if name not in ("constant", "lookup_constant"):
        assert len(set(flat)) > 1, f"{name} never varied the length: {lengths}"
    if batch == 4 and name in ("libraspec", "lookup_libraspec", "heuristic"):
        assert any(len(set(r)) > 1 for r in lengths), "rows never had different lengths in one round"


@pytest.mark.parametrize("lookup", [False, True])
def test_relaxed_rule_with_ragged_lengths(tiny_pair, lms, ar_ref, lookup):
    """static_ensemble with w_target = 1 (and the extra bonus draft step) is greedy SD: equal to AR."""
    target, draft = lms
    policy, lk = POLICIES["lookup_libraspec" if lookup else "libraspec"]()
    outs = generate_speculative(draft, target, _prompts(tiny_pair, 4), params=GREEDY, max_new_tokens=[40] * 4,
                                stopper=StopChecker(tiny_pair.eos_ids), rule=get_rule("static_ensemble"),
                                rule_kwargs={"w_target": 1.0, "mix": "prob"}, exact_bonus=True,
                                policy=policy, lookup=lk)
    assert [o.tokens for o in outs] == ar_ref


def test_stateful_rule_with_ragged_lengths(tiny_pair, lms):
    target, draft = lms
    outs = generate_speculative(draft, target, _prompts(tiny_pair, 4), params=GREEDY, max_new_tokens=[20] * 4,
                                stopper=StopChecker([]), rule=get_rule("asd"),
                                rule_kwargs={"budget": 8.0, "gate": 0.25, "cap": 2, "value": "suffix"},
                                policy=HeuristicPolicy(initial=2, max_len=6))
    assert all(len(o.tokens) == 20 for o in outs)


@pytest.mark.parametrize("exact_bonus", [False, True])
@pytest.mark.parametrize("name", ["libraspec", "confidence", "lookup_libraspec"])
def test_caches_exact_with_ragged_lengths(tiny_pair, lms, name, exact_bonus):
    target, draft = lms
    prompts = _prompts(tiny_pair, 4)
    max_new = 30
    seen = []

    def check(r):
        t_len = r["tstate"].lengths.tolist()
        d_len = r["dstate"].lengths.tolist() if r["dstate"] is not None else None
        for pos, rid in enumerate(r["rows"]):
            toks = r["tokens"][pos]
            if len(toks) >= max_new:
                continue
            committed = len(prompts[rid]) + len(toks)
            assert t_len[pos] == committed - 1
            if d_len is not None:
                unfed = 2 if int(r["n"][pos]) > r["n_fed"] else 1
                assert d_len[pos] == committed - unfed
        if len(r["rows"]) == 1:
            assert r["tstate"].cache.get_seq_length() == t_len[0]
        seen.append(r["lengths"].tolist())

    policy, lk = POLICIES[name]()
    generate_speculative(draft, target, prompts, params=SamplingParams(1.0), max_new_tokens=[max_new] * 4,
                         stopper=StopChecker([]), rule=get_rule("sd"), policy=policy, lookup=lk,
                         exact_bonus=exact_bonus, generator=torch.Generator().manual_seed(0), on_round=check)
    assert any(len(set(r)) > 1 for r in seen)


def _first_two_token_law(model, prompt):
    with torch.no_grad():
        p1 = torch.softmax(model(torch.tensor([prompt])).logits[0, -1].double(), -1)
        vocab = p1.shape[0]
        seqs = torch.cat([torch.tensor(prompt).repeat(vocab, 1), torch.arange(vocab)[:, None]], dim=1)
        p2 = torch.softmax(model(seqs).logits[:, -1].double(), -1)
    return p1.numpy(), (p1[:, None] * p2).sum(0).numpy()


def _chi2(samples, probs, top=12):
    from scipy.stats import chisquare

    order = np.argsort(-probs)[:top]
    counts = np.bincount(samples, minlength=probs.shape[0])
    obs = np.append(counts[order], counts.sum() - counts[order].sum())
    exp = np.append(probs[order], 1 - probs[order].sum()) * counts.sum()
    return chisquare(obs, exp).pvalue


@pytest.fixture(scope="module")
def laws(tiny_pair):
    prompt = _prompts(tiny_pair, 1)[0]
    return prompt, _first_two_token_law(tiny_pair.target, prompt), _first_two_token_law(tiny_pair.draft, prompt)[0]


@pytest.mark.parametrize("name", ["confidence", "entropy", "libraspec", "lookup_libraspec"])
def test_sampled_sd_with_policy_keeps_target_law(tiny_pair, lms, laws, name):
    """T=1: the first two tokens follow the target's law (chi-square, alpha = 1e-3) under the policies whose
    length depends on the current round (heuristic / constant lengths depend on past rounds only, and the
    constant case is tests/decoding's chi-square test)."""
    target, draft = lms
    prompt, (p1, p2), q1 = laws
    n = 3000
    policy, lk = POLICIES[name]()
    if name == "confidence":  # at T=1 the sampled token's q(x) is ~0.01 on the tiny draft
        policy = ConfidencePolicy(threshold=0.012, max_len=6, adapt=True, min_samples=3)
    if name == "entropy":  # every row shares q_1 (same prompt): let x_1 pass, so the stop varies from x_2 on
        with torch.no_grad():
            q = torch.softmax(tiny_pair.draft(torch.tensor([prompt])).logits[0, -1].double(), -1)
        h1 = float(-(q * q.log()).sum())
        policy = EntropyPolicy(h=float(np.sqrt(0.15 * (h1 + 0.02))), max_len=6)
    lengths = []
    outs = generate_speculative(draft, target, [prompt] * n, params=SamplingParams(1.0), max_new_tokens=[2] * n,
                                stopper=StopChecker([]), rule=get_rule("sd"), policy=policy, lookup=lk,
                                generator=torch.Generator().manual_seed(7),
                                on_round=lambda r: lengths.append(torch.bincount(r["lengths"])))
    t1 = np.array([o.tokens[0] for o in outs])
    t2 = np.array([o.tokens[1] for o in outs])
    assert _chi2(t1, p1) > 1e-3
    assert _chi2(t2, p2) > 1e-3
    assert _chi2(t1, q1) < 1e-3  # the test has power: the draft's own law is rejected
    if name != "lookup_libraspec":  # identical prompts: prompt lookup proposes the same for every row
        assert int((lengths[0] > 0).sum()) > 1  # rows of the first round proposed different lengths

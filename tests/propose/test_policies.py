"""Draft-length policies on scripted confidences and outcomes, LibraSpec against brute force, prompt lookup,
and the cost model (no models involved)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from relaxspec.propose import (
    ConfidencePolicy,
    ConstantPolicy,
    EntropyPolicy,
    HeuristicPolicy,
    LibraSpecPolicy,
    PromptLookup,
    StepInfo,
    build_draft,
    find_continuation,
    libraspec_length,
    load_cost_model,
    roc_threshold,
    validate_draft,
)


def run_round(policy, state, conf, entropy=None, token_prob=None):
    """Drive one round through the hooks exactly as generate_speculative does; return per-row lengths.

    conf / entropy / token_prob: [B, max_len] scripted per-position values.
    """
    b, g = conf.shape
    entropy = torch.zeros(b, g) if entropy is None else entropy
    token_prob = torch.ones(b, g) if token_prob is None else token_prob
    budget = policy.begin_round(state).clamp(1, policy.max_len)
    active = torch.ones(b, dtype=torch.bool)
    lengths = torch.zeros(b, dtype=torch.long)
    for j in range(1, min(g, policy.max_len) + 1):
        step = StepInfo(j, conf[:, j - 1], entropy[:, j - 1])
        active &= (policy.admit(state, step) | (j <= policy.min_len)) & (j <= budget)
        if not active.any():
            break
        lengths[active] = j
        step.token_prob = token_prob[:, j - 1]
        active &= policy.extend(state, step) & (j < budget)
        if not active.any():
            break
    return lengths


def test_constant():
    pol = ConstantPolicy(4)
    st = pol.init(3)
    for _ in range(3):
        L = run_round(pol, st, torch.full((3, 10), 0.01))
        assert L.tolist() == [4, 4, 4]
        pol.end_round(st, L, torch.tensor([0, 4, 2]), torch.ones(3, 4))


def test_heuristic_schedule():
    pol = HeuristicPolicy(initial=5, max_len=9)
    st = pol.init(2)
    seen = []
    # row 0: full, full, full (capped at 9), miss, miss; row 1: miss every round down to 1
    for r in range(6):
        L = run_round(pol, st, torch.ones(2, 12))
        seen.append(L.tolist())
        n = torch.tensor([int(L[0]) if r < 3 else 0, 0])
        pol.end_round(st, L, n, torch.ones(2, int(L.max())))
    assert [s[0] for s in seen] == [5, 7, 9, 9, 8, 7]
    assert [s[1] for s in seen] == [5, 4, 3, 2, 1, 1]


def test_heuristic_select_keeps_rows():
    pol = HeuristicPolicy(initial=3, max_len=10)
    st = pol.init(3)
    pol.end_round(st, torch.tensor([3, 3, 3]), torch.tensor([3, 0, 3]), torch.ones(3, 3))
    st = pol.select(st, [1, 2])
    assert run_round(pol, st, torch.ones(2, 10)).tolist() == [2, 5]


def test_confidence_stops_after_the_low_token():
    pol = ConfidencePolicy(threshold=0.4, max_len=6, adapt=False)
    st = pol.init(3)
    tp = torch.tensor([[0.9, 0.8, 0.3, 0.9, 0.9, 0.9],  # stops after x_3 (x_3 still verified)
                       [0.1, 0.9, 0.9, 0.9, 0.9, 0.9],  # x_1 only
                       [0.9, 0.9, 0.9, 0.9, 0.9, 0.9]])  # up to max_len
    assert run_round(pol, st, torch.ones(3, 6), token_prob=tp).tolist() == [3, 1, 6]


def test_roc_threshold_matches_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for _ in range(20):
        y = rng.integers(0, 2, 40)
        s = np.clip(rng.normal(0.4 + 0.3 * y, 0.2), 0, 1).round(2)
        fpr, tpr, thr = sk.roc_curve(y, s, drop_intermediate=False)
        best = (fpr + 3 * (1 - tpr)).min()
        t = roc_threshold(s, y)
        pred = s >= t
        cost = (pred & (y == 0)).sum() / (y == 0).sum() + 3 * (1 - (pred & (y == 1)).sum() / (y == 1).sum())
        assert cost == pytest.approx(best)


def test_confidence_adapts_only_with_enough_of_both_classes():
    pol = ConfidencePolicy(threshold=0.4, max_len=4, adapt=True, min_samples=5)
    st = pol.init(1)
    # rounds of 4 proposed tokens: accepted tokens have prob 0.7, the rejected one 0.2
    for r in range(5):
        pol.end_round(st, torch.tensor([4]), torch.tensor([2]), torch.tensor([[0.7, 0.7, 0.2, 0.9]]))
        ones, zeros = 2 * (r + 1), r + 1
        if zeros < 5:
            assert float(st["threshold"][0]) == 0.4, (ones, zeros)
    assert len(st["probs"][0]) == 15 and sum(st["matches"][0]) == 10  # x_4 (after the rejection) is not recorded
    assert float(st["threshold"][0]) == pytest.approx(0.7)  # separates 0.7 (accepted) from 0.2 (rejected)
    tp = torch.tensor([[0.8, 0.75, 0.5, 0.9]])
    assert run_round(pol, st, torch.ones(1, 4), token_prob=tp).tolist() == [3]


def test_entropy_stop():
    pol = EntropyPolicy(h=0.3, max_len=8)  # stop after x_t when H(q_t) > 0.3^2 / 0.15 = 0.6
    st = pol.init(2)
    ent = torch.tensor([[0.1, 0.5, 0.7, 0.1, 0.1], [0.65, 0.0, 0.0, 0.0, 0.0]])
    assert run_round(pol, st, torch.ones(2, 5), entropy=ent).tolist() == [3, 1]


def _brute(conf, cost, l_min, l_max):
    a = np.cumprod(conf[:l_max])
    e = 1 + np.concatenate([[0.0], np.cumsum(a)])
    s = np.array([e[L] / cost[L] for L in range(l_min, l_max + 1)])
    return l_min + int(np.argmax(s)), s


@pytest.mark.parametrize("seed", range(5))
def test_libraspec_maximises_expected_speedup(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        g = int(rng.integers(1, 17))
        conf = np.sort(rng.uniform(0.05, 1.0, g))[::-1].copy() if rng.random() < 0.5 else rng.uniform(0.05, 1.0, g)
        inc = np.sort(rng.uniform(0.0, 2.0, g))  # non-decreasing increments: convex C
        cost = np.concatenate([[rng.uniform(0.5, 5.0)], rng.uniform(0.5, 5.0) + np.cumsum(inc)])
        l_min = int(rng.integers(1, g + 1))
        L = libraspec_length(conf, cost, l_min, g)
        best, s = _brute(conf, cost, l_min, g)
        assert s[L - l_min] >= s.max() * (1 - 1e-12), (L, best)
        # the batched policy, driven position by position, picks the same length
        pol = LibraSpecPolicy(cost, max_len=g, min_len=l_min)
        got = run_round(pol, pol.init(1), torch.tensor(conf[None, :], dtype=torch.float64))
        assert int(got[0]) == L


def test_libraspec_batched_rows_differ():
    cost = [1.0 + 0.2 * L for L in range(9)]
    pol = LibraSpecPolicy(cost, max_len=8)
    conf = torch.tensor([[0.99] * 8, [0.3] * 8, [0.9, 0.9, 0.1, 0.9, 0.9, 0.9, 0.9, 0.9]])
    L = run_round(pol, pol.init(3), conf)
    expect = [libraspec_length(c.tolist(), cost, 1, 8) for c in conf]
    assert L.tolist() == expect and len(set(expect)) == 3


def test_find_continuation():
    toks = [1, 2, 3, 4, 9, 9, 1, 2, 3, 5, 6, 1, 2, 3]
    assert find_continuation(toks, 3, 1, 4) == ([5, 6, 1, 2], 3)  # most recent earlier "1 2 3"
    assert find_continuation([7, 8, 9], 3, 1, 4) == ([], 0)
    assert find_continuation([5, 1, 5], 3, 1, 10) == ([1, 5], 1)
    assert find_continuation([4, 4, 4, 4], 2, 1, 3) == ([4], 2)


def test_prompt_lookup_confidences_learn_from_outcomes():
    lk = PromptLookup(max_ngram=2, min_ngram=1, c0=0.8, decay=0.5, prior=2.0)
    st = lk.init(2, 4)
    props, conf = lk.propose(st, [[1, 2, 3, 1, 2], [7, 8]], 4)
    assert props[0] == [3, 1, 2] and props[1] == [8]  # row 1 has no match: repeats its last token
    assert conf[0].tolist() == pytest.approx([0.8, 0.4, 0.2, 0.1]) and conf[1].tolist() == [0.05] * 4
    for _ in range(10):
        lk.end_round(st, torch.tensor([3, 1]), torch.tensor([3, 0]))
    c = lk.confidences(st)
    assert c[0, 0] > 0.95 and c[0, 2] > 0.85 and c[1, 0] < 0.15


def test_cost_model_and_profile_lookup(tmp_path, monkeypatch, tiny_pair):
    monkeypatch.setenv("RELAXSPEC_CACHE", str(tmp_path))
    cfg = {"profile": "auto", "on_missing": "error", "fallback": {"t_target_ms": 1.0, "t_token_ms": 0.1,
                                                                  "t_draft_ms": 0.3}}
    with pytest.raises(FileNotFoundError, match="relaxspec.profile pair=tiny"):
        load_cost_model(tiny_pair, cfg)
    with pytest.warns(UserWarning, match="affine fallback"):
        cm = load_cost_model(tiny_pair, {**cfg, "on_missing": "fallback"})
    assert cm.round_cost(2, "model") == pytest.approx(2 * 0.3 + 1.2)
    assert cm.round_cost(2, "prompt_lookup") == pytest.approx(1.2)
    from relaxspec.propose.cost import profile_path

    path = profile_path(tiny_pair)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"batches": {"1": {"draft_ms": [2.0, 2.5], "target_ms": [10.0, 11.0, 12.0]},
                                            "4": {"draft_ms": [3.0], "target_ms": [20.0]}}}))
    cm = load_cost_model(tiny_pair, cfg, batch=2)
    assert cm.meta["batch"] == 1 and cm.target(5) == pytest.approx(14.0)  # linear beyond the measured range
    assert cm.costs(3, "model", exact_bonus=True) == pytest.approx([12.0, 15.0, 18.0, 21.0])
    draft_cfg = {"policy": "libraspec", "proposer": "model", "min_len": 1, "max_len": 3, "cost": cfg}
    pol = build_draft(draft_cfg, pair=tiny_pair).policy
    assert pol.costs.tolist() == pytest.approx([10.0, 13.0, 16.0, 19.0]) and pol.cost_source == str(path)


def test_every_draft_config_builds_and_validates(tiny_pair):
    from pathlib import Path

    from omegaconf import OmegaConf

    from relaxspec.config import CONF_DIR

    for f in sorted(Path(CONF_DIR, "draft").glob("*.yaml")):
        node = OmegaConf.load(f)
        if f.stem == "constant":
            node.k = 5  # ${decode.draft_length} outside a composed config
        spec = build_draft(node, pair=tiny_pair, costs=[1.0 + 0.1 * L for L in range(41)])
        assert spec.policy.name == node.policy and spec.proposer == node.proposer
    with pytest.raises(ValueError, match="unknown keys"):
        validate_draft({"policy": "constant", "k": 3, "h": 0.1})
    with pytest.raises(ValueError, match="draft.proposer"):
        validate_draft({"policy": "constant", "k": 3, "proposer": "diffusion"})


def test_decode_draft_length_drives_the_constant_policy():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from relaxspec.config import CONF_DIR

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="evaluate", overrides=["decode.draft_length=3"])
        cfg2 = compose(config_name="evaluate", overrides=["draft=prompt_lookup", "draft.max_len=8"])
        cfg3 = compose(config_name="train", overrides=[])
    GlobalHydra.instance().clear()
    assert build_draft(cfg.draft).policy.k == 3
    assert cfg2.draft.proposer == "prompt_lookup" and cfg2.draft.max_len == 8
    assert cfg3.draft.policy == "constant" and cfg3.draft.k == cfg3.decode.draft_length

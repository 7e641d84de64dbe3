"""Aggregates are ratios of sums over hand-made records, never means of per-example ratios."""

from __future__ import annotations

import pytest

from relaxspec.evaluation.metrics import add_relative_metrics, method_metrics


def _rec(i, method, new, calls, drafted, accepted, wall, acc_pos=(), dr_pos=(), draft_calls=0, draft_t=0.0,
         verify_t=0.0):
    return {"id": f"ex{i}", "method": method, "wall_time_s": wall,
            "stats": {"new_tokens": new, "target_calls": calls, "drafted": drafted, "accepted": accepted,
                      "draft_calls": draft_calls, "accept_at_position": list(acc_pos),
                      "drafted_at_position": list(dr_pos)},
            "time_split": {"prefill": 0.0, "draft": draft_t, "verify": verify_t, "other": 0.0}}


def test_ratio_of_sums():
    recs = [_rec(0, "sd", new=10, calls=2, drafted=10, accepted=8, wall=1.0, acc_pos=[2, 2, 2, 1, 1],
                 dr_pos=[2, 2, 2, 2, 2]),
            _rec(1, "sd", new=30, calls=20, drafted=100, accepted=10, wall=3.0, acc_pos=[10, 0, 0, 0, 0],
                 dr_pos=[20, 20, 20, 20, 20])]
    m = method_metrics(recs)
    assert m["acceptance_rate"] == pytest.approx(18 / 110)  # not mean(0.8, 0.1) = 0.45
    assert m["mean_accepted_length"] == pytest.approx(40 / 22)  # not mean(5, 1.5)
    assert m["tokens_per_second"] == pytest.approx(40 / 4.0)  # not mean(10, 10)
    assert m["accept_at_position"] == pytest.approx([12 / 22, 2 / 22, 2 / 22, 1 / 22, 1 / 22])
    assert m["new_tokens"] == 40 and m["target_calls"] == 22 and m["n_samples"] == 2


def test_speedup_and_cost_ratio_over_common_examples():
    ar = [_rec(i, "ar", new=10, calls=10, drafted=0, accepted=0, wall=w, verify_t=w) for i, w in
          enumerate([2.0, 4.0, 100.0])]
    sd = [_rec(i, "sd", new=10, calls=3, drafted=15, accepted=9, wall=w, draft_calls=15, draft_t=0.3)
          for i, w in enumerate([1.0, 1.0])]  # ex2 not run by sd: excluded from the AR sum
    per = {"ar": method_metrics(ar), "sd": method_metrics(sd)}
    add_relative_metrics(per, ar + sd)
    assert per["sd"]["speedup_vs_ar"] == pytest.approx((2.0 + 4.0) / (1.0 + 1.0))
    assert per["ar"]["speedup_vs_ar"] == pytest.approx(1.0)
    ar_step = (2.0 + 4.0 + 100.0) / 30
    assert per["sd"]["cost_ratio_c"] == pytest.approx((0.6 / 30) / ar_step)


def test_no_baseline_no_speedup():
    per = {"sd": method_metrics([_rec(0, "sd", 5, 1, 5, 4, 1.0)])}
    add_relative_metrics(per, [])
    assert "speedup_vs_ar" not in per["sd"]

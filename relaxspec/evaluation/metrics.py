"""Aggregate per-sample records into per-method metrics, always as ratios of sums.

acceptance_rate = sum(accepted) / sum(drafted); mean_accepted_length (tau) = sum(new tokens) / sum(target
calls) (emitted tokens per target forward, bonus included; AR has tau = 1); accept_at_position[j] =
rounds that accepted draft position j / rounds that drafted it; tokens_per_second = sum(new tokens) /
sum(wall time); speedup_vs_ar = sum(AR wall time) / sum(method wall time) over the examples both ran;
cost_ratio_c = (draft time per draft forward) / (AR target time per decode step), measured in this run.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

METRIC_DEFINITIONS = {
    "acceptance_rate": "sum(accepted draft tokens) / sum(drafted tokens), over all rounds and examples",
    "mean_accepted_length": "tau = sum(new tokens) / sum(decode-phase target forwards) (bonus included; AR = 1)",
    "accept_at_position": "[j] = rounds whose draft position j+1 was accepted / rounds that drafted it",
    "tokens_per_second": "sum(new tokens) / sum(wall time)  (not a mean of per-example rates)",
    "speedup_vs_ar": "sum(AR wall time) / sum(method wall time) over the examples both ran, same process",
    "cost_ratio_c": "(draft wall time / draft forwards) / (AR decode wall time / AR target forwards)",
    "quality": "task.aggregate: mean of per-example scores with a seeded percentile-bootstrap 95% CI",
}


def _sum(records: list[dict[str, Any]], key: str) -> float:
    return float(sum(r["stats"].get(key, 0) for r in records))


def method_metrics(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Efficiency metrics of one method's records (ratios of sums)."""
    new = _sum(records, "new_tokens")
    drafted = _sum(records, "drafted")
    accepted = _sum(records, "accepted")
    calls = _sum(records, "target_calls")
    wall = float(sum(r["wall_time_s"] for r in records))
    out: dict[str, Any] = {
        "n_samples": len(records),
        "new_tokens": int(new),
        "target_calls": int(calls),
        "draft_calls": int(_sum(records, "draft_calls")),
        "drafted": int(drafted),
        "accepted": int(accepted),
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_accepted_length": new / calls if calls else None,
        "wall_time_s": wall,
        "tokens_per_second": new / wall if wall > 0 else None,
    }
    pos_acc: dict[int, float] = defaultdict(float)
    pos_dr: dict[int, float] = defaultdict(float)
    for r in records:
        for j, (a, d) in enumerate(zip(r["stats"].get("accept_at_position", []),
                                       r["stats"].get("drafted_at_position", []), strict=False)):
            pos_acc[j] += a
            pos_dr[j] += d
    out["accept_at_position"] = [pos_acc[j] / pos_dr[j] if pos_dr[j] else None for j in sorted(pos_dr)]
    w_cnt = _sum(records, "w_target_count")
    if w_cnt:
        out["mean_w_target"] = _sum(records, "w_target_sum") / w_cnt
    split = defaultdict(float)
    for r in records:
        for k, v in r.get("time_split", {}).items():
            split[k] += v
    out["time_split_s"] = dict(split)
    return out


def add_relative_metrics(per_method: dict[str, dict[str, Any]], records: list[dict[str, Any]],
                         baseline: str = "ar") -> None:
    """Speedup vs the AR baseline and the draft/target cost ratio, over examples both methods ran."""
    if baseline not in per_method:
        return
    by_method: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in records:
        by_method[r["method"]][r["id"]] = r
    ar = by_method[baseline]
    ar_step = None
    ar_calls = sum(r["stats"]["target_calls"] for r in ar.values())
    ar_decode = sum(r.get("time_split", {}).get("verify", 0.0) for r in ar.values())
    if ar_calls:
        ar_step = ar_decode / ar_calls
    for name, m in per_method.items():
        common = [i for i in by_method[name] if i in ar]
        t_ar = sum(ar[i]["wall_time_s"] for i in common)
        t_m = sum(by_method[name][i]["wall_time_s"] for i in common)
        m["speedup_vs_ar"] = t_ar / t_m if t_m > 0 and common else None
        dcalls = sum(by_method[name][i]["stats"].get("draft_calls", 0) for i in common)
        dtime = sum(by_method[name][i].get("time_split", {}).get("draft", 0.0) for i in common)
        if dcalls and ar_step:
            m["cost_ratio_c"] = (dtime / dcalls) / ar_step

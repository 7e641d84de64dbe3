"""lm-eval integration: registration, the CLI on the tiny pair, target loglikelihoods, sandboxed pass@1."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import BIN, ROOT, child_env, run_cmd


@pytest.fixture(scope="module")
def tiny_lm():
    from relaxspec.lm_eval.model import RelaxSpecLM

    return RelaxSpecLM(pair="tiny", method="sd", max_gen_toks=12, batch_size=2)


class _Req:
    def __init__(self, args, task_name="t"):
        self.args, self.task_name = args, task_name


def test_registered_in_process():
    from lm_eval.api.registry import get_model

    import relaxspec.lm_eval as rl

    rl.register()
    cls = get_model("relaxspec")
    assert cls.__name__ == "RelaxSpecLM" and cls.__module__ == "relaxspec.lm_eval.model"
    assert get_model("hf") is not None  # lm-eval's own models are still there


def test_pth_hook_makes_plain_lm_eval_see_the_model():
    from relaxspec.lm_eval.hook import PTH_LINE, pth_path

    if not (pth_path().is_file() and pth_path().read_text() == PTH_LINE):
        pytest.skip("hook not installed: run `python -m relaxspec.lm_eval install-hook` (make install)")
    code = "from lm_eval.api.registry import get_model; c = get_model('relaxspec'); print(c.__module__, c.__name__)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["relaxspec.lm_eval.model", "RelaxSpecLM"]


def test_lm_eval_cli_tiny(tmp_path):
    """generate_until (HumanEval, sandboxed pass@1) + loglikelihood (MC) + loglikelihood_rolling, limit 2."""
    from relaxspec.lm_eval.hook import PTH_LINE, pth_path

    hooked = pth_path().is_file() and pth_path().read_text() == PTH_LINE and shutil.which("lm_eval", path=str(BIN))
    cli = [str(BIN / "lm_eval")] if hooked else [sys.executable, "-m", "relaxspec.lm_eval"]
    stats = tmp_path / "relaxspec_stats.json"
    res = run_cmd([*cli, "--model", "relaxspec", "--model_args",
                   f"pair=tiny,method=sd,max_gen_toks=8,draft_length=3,stats_path={stats}",
                   "--tasks", "relaxspec_humaneval,relaxspec_toy_mc,relaxspec_toy_ppl",
                   "--include_path", "lm_eval_tasks", "--limit", "2", "--output_path", str(tmp_path / "out")],
                  timeout=300)
    out = res.stdout
    assert "relaxspec: task=relaxspec_humaneval method=sd pair=tiny k=3 acceptance=" in out
    for name in ("relaxspec_humaneval", "pass@1", "relaxspec_toy_mc", "acc", "relaxspec_toy_ppl", "word_perplexity"):
        assert name in out
    results = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())
    rep = results["config"]["relaxspec"]
    task = rep["tasks"]["relaxspec_humaneval"]
    assert task["n_samples"] == 2 and 0 < task["new_tokens"] <= 16 and task["mean_accepted_length"] >= 1
    assert 0 <= task["acceptance_rate"] <= 1 and rep["loglikelihood_requests"] >= 2
    assert results["results"]["relaxspec_humaneval"]["pass@1,none"] == 0.0  # random tiny model
    assert json.loads(stats.read_text())["tasks"]["relaxspec_humaneval"] == task


def test_generate_until_sd_equals_ar_greedy(tiny_lm):
    from relaxspec.lm_eval.model import RelaxSpecLM

    ar = RelaxSpecLM(pair="tiny", method="ar", max_gen_toks=12, batch_size=2)
    reqs = [_Req(("def add(a, b):", {"until": ["\n\n"], "do_sample": False})),
            _Req(("Question: 1+1?\nAnswer:", {"until": ["Question:"], "do_sample": False})),
            _Req(("hello", {"until": [], "do_sample": False, "max_gen_toks": 40}))]
    got, want = tiny_lm.generate_until(reqs, disable_tqdm=True), ar.generate_until(reqs, disable_tqdm=True)
    assert got == want and all(isinstance(g, str) for g in got)
    rep = tiny_lm.acceptance_report()
    assert rep["tasks"]["t"]["target_calls"] > 0 and rep["method"] == "sd"
    assert ar.acceptance_report()["tasks"]["t"]["acceptance_rate"] is None  # AR drafts nothing


def test_loglikelihood_is_the_target_model(tiny_lm):
    ctx, cont = "The capital of France is", " Paris"
    (lp, greedy), (lp2, _) = tiny_lm.loglikelihood([_Req((ctx, cont)), _Req((ctx, " Berlin and"))],
                                                   disable_tqdm=True)
    c_ids, w_ids = tiny_lm.tok_encode(ctx), tiny_lm.tok_encode(ctx + cont)
    with torch.no_grad():
        logits = tiny_lm.pair.target(input_ids=torch.tensor([w_ids])).logits[0].float().log_softmax(-1)
    tgt = w_ids[len(c_ids):]
    ref = sum(float(logits[len(c_ids) - 1 + i, t]) for i, t in enumerate(tgt))
    assert lp == pytest.approx(ref, abs=1e-4) and lp2 != lp
    assert greedy == all(int(logits[len(c_ids) - 1 + i].argmax()) == t for i, t in enumerate(tgt))
    (roll,) = tiny_lm.loglikelihood_rolling([_Req((ctx + cont,))], disable_tqdm=True)
    ids = [tiny_lm.prefix_token_id, *w_ids]
    with torch.no_grad():
        lg = tiny_lm.pair.target(input_ids=torch.tensor([ids[:-1]])).logits[0].float().log_softmax(-1)
    assert roll == pytest.approx(sum(float(lg[i, t]) for i, t in enumerate(ids[1:])), abs=1e-4)
    assert math.isfinite(roll) and roll < 0


def test_humaneval_pass_at_1_runs_in_the_sandbox(monkeypatch):
    from relaxspec.lm_eval import tasks
    from relaxspec.tasks import sandbox

    doc = tasks.humaneval()["test"][0]
    calls = []
    real = sandbox.run_program
    monkeypatch.setattr(sandbox, "run_program", lambda prog, **kw: calls.append(prog) or real(prog, **kw))
    assert tasks.humaneval_process_results(doc, [doc["canonical_solution"]]) == {"pass@1": 1.0}
    assert tasks.humaneval_process_results(doc, ["    return None\n"]) == {"pass@1": 0.0}
    fenced = "Here:\n```python\n" + doc["prompt"] + doc["canonical_solution"] + "```"
    assert tasks.humaneval_process_results(doc, [fenced]) == {"pass@1": 1.0}
    assert len(calls) == 3 and all(f"check({doc['entry_point']})" in p for p in calls)


def test_gsm8k_local_dataset():
    from relaxspec.lm_eval import tasks
    from relaxspec.tasks.data import DataNotFoundError

    try:
        ds = tasks.gsm8k()
    except DataNotFoundError:
        pytest.skip("no GSM8K data ($RELAXSPEC_DATA / ../shared/data)")
    assert len(ds["test"]) == 1319 and "####" in ds["test"][0]["answer"]
    assert (ROOT / "lm_eval_tasks" / "relaxspec_gsm8k.yaml").is_file()

"""MT-Bench: 80 two-turn questions, turn-2 conditioning, temperatures, judge prompts and parsing, fidelity."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from relaxspec.tasks import build_task
from relaxspec.tasks.fidelity import rouge_l, target_nll
from relaxspec.tasks.judge import Judge, OpenAIJudge, build_judge, judge_messages, parse_score


@pytest.fixture
def task(shared_data):
    return build_task({"name": "mt_bench", "seed": None})


def test_questions_and_turns(task):
    exs = task.examples()
    assert len(exs) == 80 and exs[0]["id"] == "mt_bench/81"
    assert all(task.num_turns(e) == 2 for e in exs)
    ex = exs[0]
    m1 = task.messages(ex, [])
    assert m1 == [{"role": "user", "content": ex["turns"][0]}]
    m2 = task.messages(ex, ["MY FIRST ANSWER"])
    assert [m["role"] for m in m2] == ["user", "assistant", "user"]
    assert m2[1]["content"] == "MY FIRST ANSWER" and m2[2]["content"] == ex["turns"][1]
    with pytest.raises(ValueError):
        task.messages(ex, ["a", "b"])
    temps = {e["category"]: task.temperature(e) for e in exs}
    assert temps == {"writing": 0.7, "roleplay": 0.7, "reasoning": 0.0, "math": 0.0, "coding": 0.0,
                     "extraction": 0.0, "stem": 0.1, "humanities": 0.1}
    assert task.stop == []


def test_judge_prompts(task):
    exs = {e["category"]: e for e in task.examples()}
    prompts = task.judge_prompts
    name, msgs = judge_messages(prompts, exs["writing"], ["A1"], 1)
    assert name == "single-v1" and "A1" in msgs[1]["content"] and exs["writing"]["turns"][0] in msgs[1]["content"]
    math_ex = exs["math"]
    ref = task.reference_for(math_ex)
    assert ref and len(ref) == 2
    name, msgs = judge_messages(prompts, math_ex, ["A1", "A2"], 2, ref)
    assert name == "single-math-v1-multi-turn"
    assert all(s in msgs[1]["content"] for s in ("A1", "A2", ref[0], ref[1], math_ex["turns"][1]))
    assert msgs[0]["role"] == "system"


@pytest.mark.parametrize(("text", "score"), [("Rating: [[7]]", 7.0), ("[[8.5]] great", 8.5),
                                             ("I give it [6].", 6.0), ("no verdict", None), ("[[x]]", None)])
def test_parse_score(text, score):
    assert parse_score(text) == score


class _FakeJudge:
    identity = "fake:judge"

    def complete(self, messages):
        return "Explanation... Rating: [[9]]" if "coding" not in messages[1]["content"] else "no verdict"


def test_score_with_judge(shared_data):
    judge = _FakeJudge()
    assert isinstance(judge, Judge)
    task = build_task({"name": "mt_bench"})
    task._judge = judge
    ex = task.examples(limit=1, seed=None)[0]
    out = task.score(ex, ["first", "second answer"])
    assert out["judge"] == "fake:judge" and out["judge_turn1"] == 9.0 and out["judge_score"] == 9.0
    assert out["chars_turn1"] == 5.0
    plain = build_task({"name": "mt_bench"}).score(ex, ["first", "second"])
    assert "judge_score" not in plain


def test_openai_judge_against_local_server(monkeypatch):
    seen = {}

    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            seen["body"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen["auth"] = self.headers.get("Authorization")
            data = json.dumps({"choices": [{"message": {"content": "Rating: [[4]]"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_port}/v1"
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("RELAXSPEC_JUDGE_URL", url)
        j = build_judge({"kind": "openai", "model": "m", "max_new_tokens": 16})
        assert isinstance(j, OpenAIJudge) and j.identity == f"openai:m@{url}"
        assert parse_score(j.complete([{"role": "user", "content": "hi"}])) == 4.0
        assert seen["body"]["model"] == "m" and seen["body"]["max_tokens"] == 16 and seen["auth"] == "Bearer sk-test"
    finally:
        srv.shutdown()
    assert build_judge({"kind": "none"}) is None
    with pytest.raises(ValueError, match="valid: none, hf, openai"):
        build_judge({"kind": "gpt"})


def test_rouge_l():
    assert rouge_l("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(1.0)
    assert rouge_l("completely different words", "the cat sat") == 0.0
    assert 0.0 < rouge_l("the cat sat", "the cat sat on the mat") < 1.0


class _TinyLM(torch.nn.Module):
    def __init__(self, vocab=7):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, vocab)

    def forward(self, input_ids):
        return type("Out", (), {"logits": self.emb(input_ids)})()


def test_target_nll():
    torch.manual_seed(0)
    lm = _TinyLM()
    prompt, answer = torch.tensor([1, 2, 3]), torch.tensor([[4, 5]])
    logp = torch.log_softmax(lm.emb(torch.tensor([3, 4])), -1)
    expected = (-(logp[0, 4] + logp[1, 5]) / 2).item()
    assert target_nll(lm, prompt, answer) == pytest.approx(expected, rel=1e-5)
    assert torch.isnan(torch.tensor(target_nll(lm, prompt, torch.tensor([], dtype=torch.long))))

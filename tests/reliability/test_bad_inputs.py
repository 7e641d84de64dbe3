"""Bad inputs give ONE clear error before heavy work starts, and leave no results behind.

Two layers:

* the CLI (`python evaluate.py ...` in a subprocess): exit code != 0, the problem named on stderr, no
  `samples.jsonl` / `metrics.json` / `log.jsonl` in the run directory; and, as the contract, stderr is a single
  line starting with `error:`;
* the library (`check_tokenizers`, `load_pair`, `WeightHead.load`, `assets.verify_file`/`assemble`): the
  documented exception type with a one-line message that names the problem, raised before models are loaded.

Degenerate inputs of the verification rules are covered at the end (NaN / inf logits) and in
tests/verify/test_verify_properties.py::test_degenerate_inputs_never_nan (q(x)=0, one-hot p/q, all-zero rows).
"""

from __future__ import annotations

import hashlib
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from reliability_helpers import ROOT, run_cli, stderr_lines

from relaxspec.models import assets
from relaxspec.models.assets import AssetError
from relaxspec.models.pairs import PairError, check_tokenizers, load_pair, tiny_models, tiny_tokenizer
from relaxspec.models.weight_head import HeadMismatchError, WeightHead
from relaxspec.verify import RULES, get_rule

SECTION_CLI = "Bad inputs: `evaluate.py` command line"
SECTION_LIB = "Bad inputs: library checks"
RESULT_FILES = ("samples.jsonl", "metrics.json", "log.jsonl")
ALLOWED_FILES = {".hydra", "config.yaml", "evaluate.log", "FAILED", "error.txt"}  # config, log, failure markers



def _one_line_error(res) -> bool:
    lines = stderr_lines(res)
    return len(lines) == 1 and lines[0].startswith("error: ")


def _no_results(run_dir: Path) -> list[str]:
    """Files in the run directory beyond the config/log (must be none)."""
    if not run_dir.exists():
        return []
    return sorted(p.name for p in run_dir.iterdir() if p.name not in ALLOWED_FILES)


# ------------------------------------------------------------------------------------- precheck (fast)

PRECHECK = [
    # (id, overrides, words the message must contain)
    ("unknown method", ["method=bogus"], ["method/bogus"]),
    ("unknown dataset", ["dataset=bogus"], ["dataset/bogus"]),
    ("unknown pair", ["pair=bogus"], ["pair/bogus"]),
    ("unknown rule", ["method.rule=bogus"], ["method.rule", "bogus"]),
    ("unknown key", ["+method.lenienc=0.5"], ["lenienc"]),
    ("lenience < 0", ["method=lossy", "method.lenience=-0.5"], ["method.lenience"]),
    ("lenience NaN", ["method=lossy", "method.lenience=nan"], ["method.lenience", "nan"]),
    ("lenience not a number", ["method=lossy", "method.lenience=abc"], ["lenience"]),
    ("w_draft < 0", ["method=static_ensemble", "method.w_draft=-0.1"], ["method.w_draft"]),
    ("w_draft NaN", ["method=static_ensemble", "method.w_draft=nan"], ["method.w_draft", "nan"]),
    ("w_draft > 1", ["method=static_ensemble", "method.w_draft=1.5"], ["method.w_draft"]),
    ("alpha < 0", ["method=cascade_opt", "method.alpha=-1"], ["method.alpha"]),
    ("alpha NaN", ["method=cascade_token", "method.alpha=nan"], ["method.alpha", "nan"]),
    ("budget < 0", ["method=asd", "decode.temperature=0", "method.budget=-1"], ["budget"]),
    ("budget NaN", ["method=asd", "decode.temperature=0", "method.budget=nan"], ["budget", "nan"]),
    ("gate NaN", ["method=asd", "decode.temperature=0", "method.gate=nan"], ["gate", "nan"]),
    ("cap < 0", ["method=asd", "decode.temperature=0", "method.cap=-1"], ["cap"]),
    ("asd at T > 0", ["method=asd", "decode.temperature=1"], ["greedy only"]),
    ("temperature < 0", ["decode.temperature=-1"], ["decode.temperature"]),
    ("temperature NaN", ["decode.temperature=nan"], ["decode.temperature", "nan"]),
    ("top_p NaN", ["decode.top_p=nan"], ["decode.top_p", "nan"]),
    ("top_p = 0", ["decode.top_p=0"], ["decode.top_p"]),
    ("top_p < 0", ["decode.top_p=-0.1"], ["decode.top_p"]),
    ("top_p > 1", ["decode.top_p=1.5"], ["decode.top_p"]),
    ("top_k < 0", ["decode.top_k=-1"], ["decode.top_k"]),
    ("max_new_tokens = 0", ["decode.max_new_tokens=0"], ["decode.max_new_tokens"]),
    ("draft_length = 0", ["decode.draft_length=0"], ["decode.draft_length"]),
    ("batch_size = 0", ["decode.batch_size=0"], ["decode.batch_size"]),
    ("dataset.limit = 0", ["dataset.limit=0"], ["dataset.limit"]),
    ("missing pair path", ["pair.draft.path=/nonexistent/model"], ["pair.draft.path", "does not exist"]),
    ("missing head", ["method=diversed", "method.head=/nonexistent/head"], ["method.head", "does not exist"]),
    ("temperature inf", ["decode.temperature=inf"], ["decode.temperature", "inf"]),
    ("unknown method in a list", ["methods=[ar,bogus]"], ["bogus"]),
    ("NaN next to a method list", ["methods=[ar,sd]", "decode.temperature=nan"], ["decode.temperature"]),
]



def _precheck_params():
    for name, overrides, words in PRECHECK:
        marks = []
        yield pytest.param(overrides, words, id=name, marks=marks)


@pytest.mark.parametrize(("overrides", "words"), list(_precheck_params()))
def test_precheck_one_line_error(observe, tmp_path, request, overrides, words):
    run_dir = tmp_path / "run"
    pair = [] if any(o.startswith("pair=") for o in overrides) else ["pair=tiny"]
    res = run_cli([*pair, *overrides, f"hydra.run.dir={run_dir}"], timeout=120)
    lines = stderr_lines(res)
    observe(SECTION_CLI, f"{request.node.callspec.id}: `{' '.join(overrides)}`", "exit 2, one line `error: ...`",
            f"exit {res.returncode}, {len(lines)} stderr line(s): {lines[0] if lines else '(none)'}")
    assert res.returncode != 0, res.stdout[-500:]
    assert _one_line_error(res), res.stderr[-2000:]
    assert all(w.lower() in lines[0].lower() for w in words), lines[0]
    assert not _no_results(run_dir)


# ------------------------------------------------------------------------------- assets for deeper checks


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """Tiny HF model directories: a good draft/target, a target with another vocabulary, broken copies."""
    root = tmp_path_factory.mktemp("hf")
    tok = tiny_tokenizer()
    draft, target = tiny_models(len(tok), hidden=64, target_layers=3, draft_layers=2, seed=0, init_std=0.15)
    dirs = {name: root / name for name in ("draft", "target", "other_vocab", "truncated", "missing")}
    draft.save_pretrained(dirs["draft"])
    tok.save_pretrained(dirs["draft"])
    target.save_pretrained(dirs["target"])
    tok.save_pretrained(dirs["target"])
    shutil.copytree(dirs["target"], dirs["other_vocab"])
    other = tiny_tokenizer()
    other.add_tokens(["<|extra_1|>", "<|extra_2|>"], special_tokens=True)
    other.save_pretrained(dirs["other_vocab"])
    shutil.copytree(dirs["draft"], dirs["truncated"])
    f = dirs["truncated"] / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    shutil.copytree(dirs["draft"], dirs["missing"])
    (dirs["missing"] / "model.safetensors").unlink()
    head = root / "head_other_pair"
    WeightHead(896, 1536, meta={"mix": "prob"}).save(head)  # a head trained for Qwen2.5-Coder 0.5B/1.5B
    dirs["head_other_pair"] = head
    return dirs


def _hf_pair(dirs, draft: str, target: str) -> list[str]:
    return ["pair=tiny", "pair.source=hf", f"pair.draft.path={dirs[draft]}", f"pair.target.path={dirs[target]}"]


DEEP = {
    # id: (overrides(dirs), words the message must name)
    "mismatched tokenizers (local HF pair)": (lambda d: _hf_pair(d, "draft", "other_vocab"), ["tokenizers"]),
    "truncated model.safetensors": (lambda d: _hf_pair(d, "truncated", "target"), ["truncated", "header"]),
    "missing model weights": (lambda d: _hf_pair(d, "missing", "target"), ["model.safetensors", "no file named"]),
    "head checkpoint of another pair": (
        lambda d: ["pair=tiny", "method=diversed", f"method.head={d['head_other_pair']}"], ["d_draft"]),
    "empty dataset (`dataset.prompts=[]`)": (lambda d: ["pair=tiny", "dataset.prompts=[]"], ["prompts"]),
    "prompt longer than the context (5000 chars, tiny pair = 4096 positions)": (
        lambda d: ["pair=tiny", "dataset.prompts=[" + "x" * 5000 + "]"], ["context length"]),
}


@pytest.fixture(scope="module")
def deep_runs(hf_dirs, tmp_path_factory):
    """Run every deep case once (two at a time: they import torch and load the tiny pair)."""
    base = tmp_path_factory.mktemp("runs")

    def one(item):
        i, (name, (make, _)) = item
        run_dir = base / f"run{i}"
        args = [*make(hf_dirs), "decode.max_new_tokens=4", "warmup=0", f"hydra.run.dir={run_dir}"]
        return name, (run_cli(args, timeout=240), run_dir)

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(one, enumerate(DEEP.items())))


def _first_error_line(res) -> str:
    lines = stderr_lines(res)
    for ln in reversed(lines):
        if ln.startswith(("error:", "relaxspec.", "safetensors", "ValueError", "OSError")) or "Error:" in ln:
            return ln
    return lines[-1] if lines else ""


@pytest.mark.parametrize("name", list(DEEP))
def test_deep_bad_input_refused(observe, deep_runs, name):
    """Refused (exit != 0), the problem named, nothing generated."""
    res, run_dir = deep_runs[name]
    words = DEEP[name][1]
    msg = _first_error_line(res)
    observe(SECTION_CLI, name, "refused before generation, problem named, no results",
            f"exit {res.returncode}, {len(stderr_lines(res))} stderr line(s); message: {msg}")
    assert res.returncode != 0, res.stdout[-1000:]
    assert any(w.lower() in res.stderr.lower() for w in words), res.stderr[-2000:]
    assert not _no_results(run_dir), _no_results(run_dir)




@pytest.mark.parametrize("name", DEEP)
def test_deep_bad_input_one_line(observe, deep_runs, name):
    """The contract: a single stderr line starting with `error:` and exit code 2."""
    res, _ = deep_runs[name]
    lines = stderr_lines(res)
    observe(SECTION_CLI, f"{name}: one `error:` line", "exit 2, one line",
            f"exit {res.returncode}, {len(lines)} stderr line(s), first: {lines[0] if lines else '(none)'}")
    assert res.returncode == 2 and _one_line_error(res), res.stderr[-2000:]


# ----------------------------------------------------------------------------------------- library layer


def test_check_tokenizers_different_vocab(observe):
    a, b = tiny_tokenizer(), tiny_tokenizer()
    b.add_tokens(["<|extra|>"], special_tokens=True)
    with pytest.raises(PairError) as exc:
        check_tokenizers(a, b, ("draft-x", "target-y"))
    msg = str(exc.value)
    observe(SECTION_LIB, "`check_tokenizers` on two tiny tokenizers with different vocabularies",
            "PairError, one line", msg)
    assert "\n" not in msg and "draft-x" in msg and "target-y" in msg and "vocabulary" in msg
    check_tokenizers(a, tiny_tokenizer(), ("a", "b"))  # identical ones pass


def _pair_cfg(dirs, draft, target):
    cfg = OmegaConf.load(ROOT / "conf" / "pair" / "tiny.yaml")
    cfg.source = "hf"
    cfg.draft.path, cfg.target.path = str(dirs[draft]), str(dirs[target])
    return cfg


@pytest.fixture
def count_model_loads(monkeypatch):
    from relaxspec.models import pairs

    calls: list[str] = []
    real = pairs.AutoModelForCausalLM.from_pretrained

    def spy(where, *a, **k):
        calls.append(str(where))
        return real(where, *a, **k)

    monkeypatch.setattr(pairs.AutoModelForCausalLM, "from_pretrained", spy)
    return calls


def test_load_pair_mismatched_tokenizers(observe, hf_dirs, count_model_loads):
    with pytest.raises(PairError) as exc:
        load_pair(_pair_cfg(hf_dirs, "draft", "other_vocab"))
    msg = str(exc.value)
    observe(SECTION_LIB, "`load_pair` on a local HF pair whose tokenizers differ", "PairError, one line",
            f"{msg} (models loaded first: {len(count_model_loads)})")
    assert "\n" not in msg and "tokenizers" in msg


def test_load_pair_checks_tokenizers_before_loading_models(observe, hf_dirs, count_model_loads):
    with pytest.raises(PairError):
        load_pair(_pair_cfg(hf_dirs, "draft", "other_vocab"))
    observe(SECTION_LIB, "tokenizer mismatch detected before any model is loaded", "0 model loads",
            f"{len(count_model_loads)} model load(s) before the error")
    assert not count_model_loads


def test_load_pair_missing_weights(observe, hf_dirs):
    with pytest.raises(PairError) as exc:
        load_pair(_pair_cfg(hf_dirs, "missing", "target"))
    msg = str(exc.value)
    observe(SECTION_LIB, "`load_pair` with a model dir without weights", "PairError, one line", msg)
    assert "\n" not in msg and str(hf_dirs["missing"]) in msg


def test_load_pair_truncated_weights(observe, hf_dirs):
    try:
        load_pair(_pair_cfg(hf_dirs, "truncated", "target"))
    except Exception as exc:  # noqa: BLE001 - we record whatever comes out
        observe(SECTION_LIB, "`load_pair` with a truncated model.safetensors", "PairError naming the file",
                f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
        assert isinstance(exc, PairError) and str(hf_dirs["truncated"]) in str(exc)
    else:
        pytest.fail("a truncated model loaded")


def test_head_for_another_pair(observe, hf_dirs, tiny_pair):
    from relaxspec.models.pairs import hidden_size

    with pytest.raises(HeadMismatchError) as exc:
        WeightHead.load(hf_dirs["head_other_pair"], d_draft=hidden_size(tiny_pair.draft),
                        d_target=hidden_size(tiny_pair.target))
    msg = str(exc.value)
    observe(SECTION_LIB, "`WeightHead.load` of a head trained for another pair (896/1536 vs 64/64)",
            "HeadMismatchError, one line", msg)
    assert "\n" not in msg and "d_draft=896" in msg and "64" in msg


def test_corrupted_weight_part(observe, tmp_path):
    blob = bytes(range(256)) * 64
    good = hashlib.sha256(blob).hexdigest()
    f = tmp_path / "model.gguf"
    f.write_bytes(blob)
    assets.verify_file(f, good, len(blob))  # the intact file passes
    bad = bytearray(blob)
    bad[1000] ^= 0xFF  # one flipped byte, same size
    f.write_bytes(bytes(bad))
    with pytest.raises(AssetError) as exc:
        assets.verify_file(f, good, len(blob))
    msg = str(exc.value)
    observe(SECTION_LIB, "corrupted weight file (one flipped byte, same size): `assets.verify_file`",
            "AssetError: sha256 mismatch", msg)
    assert "\n" not in msg and "sha256 mismatch" in msg and good in msg
    # a corrupted part is caught when the parts are assembled, and nothing is renamed into place
    parts = [tmp_path / "p1", tmp_path / "p2"]
    parts[0].write_bytes(bad[:8000])
    parts[1].write_bytes(blob[8000:])
    out = tmp_path / "assembled.gguf"
    with pytest.raises(AssetError, match="sha256 mismatch"):
        assets.assemble(parts, out, good, len(blob))
    assert not out.exists()
    f.write_bytes(blob[:5000])
    with pytest.raises(AssetError, match="size mismatch"):
        assets.verify_file(f, good, len(blob))


# ------------------------------------------------------------------------------- degenerate verification

SECTION_VERIFY = "Degenerate verification inputs"
HP = {
    "sd": {},
    "lossy": {"lenience": 0.5},
    "static_ensemble": {"w_target": 0.5, "mix": "prob"},
    "diversed": {"mix": "logit"},
    "cascade": {"alpha": 0.3, "deferral": "token"},
    "asd": {"budget": 4.0, "gate": 0.5, "cap": 2},
}
assert set(HP) == set(RULES)


def _nan_inputs():
    """Logits with NaN / +inf / -inf entries -> softmax gives all-NaN probability rows."""
    k, v, b = 2, 6, 4
    g = torch.Generator().manual_seed(0)
    zp, zq = torch.randn(b, k + 1, v, generator=g), torch.randn(b, k + 1, v, generator=g)
    zp[0, 0, 1] = float("nan")  # one NaN logit in the target
    zq[1, 0, 2] = float("inf")  # +inf logit in the draft
    zp[2] = float("inf")  # a whole target row of +inf
    zq[3, 1] = float("-inf")  # a whole draft position of -inf
    p, q = zp.softmax(-1), zq.softmax(-1)
    assert p.isnan().any() and q.isnan().any()
    x = torch.zeros(b, k, dtype=torch.long)
    u = torch.rand(b, k + 1, generator=g, dtype=torch.float64)
    return q, p, x, u, k, v


def _call(name, greedy, w=None):
    q, p, x, u, k, v = _nan_inputs()
    kw = dict(HP[name])
    if name == "diversed":
        kw["w"] = torch.full((x.shape[0], k + 1), 0.6) if w is None else w
    return get_rule(name)(q, p, x, u=u, greedy=greedy or name == "asd", **kw), k, v


CASES = [(n, g) for n in sorted(HP) for g in (False, True)]


@pytest.mark.parametrize(("name", "greedy"), CASES, ids=[f"{n}-{'greedy' if g else 'sampled'}" for n, g in CASES])
def test_nan_logits_do_not_crash(observe, name, greedy):
    out, k, v = _call(name, greedy)
    observe(SECTION_VERIFY, f"{name} ({'greedy' if greedy else 'sampled'}): NaN/inf logits -> NaN probs",
            "no crash, valid tokens",
            f"n_accepted={out.n_accepted.tolist()} next_token={out.next_token.tolist()} "
            f"accept_prob finite={bool(torch.isfinite(out.accept_prob).all())}")
    assert ((out.n_accepted >= 0) & (out.n_accepted <= k)).all()
    assert ((out.next_token >= 0) & (out.next_token < v)).all()
    assert torch.equal(out.accept_mask, torch.arange(k) < out.n_accepted[:, None])




def _nan_params():
    for n, g in CASES:
        marks = []
        yield pytest.param(n, g, id=f"{n}-{'greedy' if g else 'sampled'}", marks=marks)


@pytest.mark.parametrize(("name", "greedy"), list(_nan_params()))
def test_nan_logits_emit_no_nan(observe, name, greedy):
    out, _, _ = _call(name, greedy)
    bad = [f for f in ("accept_prob", "expected_accept") if not torch.isfinite(getattr(out, f)).all()]
    observe(SECTION_VERIFY, f"{name} ({'greedy' if greedy else 'sampled'}): no NaN in the outputs",
            "accept_prob/expected_accept finite", f"non-finite: {bad or 'none'}")
    assert not bad


def test_nan_ensemble_weight(observe):
    q, p, x, u, k, v = _nan_inputs()
    q, p = torch.full_like(q, 1 / v), torch.full_like(p, 1 / v)
    w = torch.full((x.shape[0], k + 1), float("nan"))
    out = get_rule("diversed")(q, p, x, u=u, w=w, mix="prob")
    observe(SECTION_VERIFY, "diversed with a NaN ensemble weight w (finite p, q)", "finite outputs",
            f"accept_prob finite={bool(torch.isfinite(out.accept_prob).all())}")
    assert torch.isfinite(out.accept_prob).all() and torch.isfinite(out.expected_accept).all()

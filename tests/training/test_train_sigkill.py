"""SIGKILL `train.py` at seeded random points (after a random checkpoint, or mid-collection), resume with
`trainer.resume=true`, and reach the same head as an uninterrupted run (tiny pair, real DeepSpeed engine)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["+experiment=diversed_gsm8k_tiny", "pair=tiny", "trainer.max_new_tokens=4", "trainer.prompts_per_round=4",
        "trainer.collect_batch_size=2", "trainer.micro_batch_size=2", "trainer.lr=0.05", "trainer.warmup_steps=1",
        "trainer.top_k_store=8", "trainer.rounds=2", "trainer.save_every=1", "logger=none"]


def _cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "train.py", *ARGS, f"output_dir={out}", f"hydra.run.dir={out}", *extra]


def _env() -> dict[str, str]:
    """A plain `python train.py` environment: no process-group variables inherited from this test process
    (an in-process trainer test may have set them, and its TCP store may still hold the port)."""
    drop = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(out: Path, *extra: str) -> None:
    res = subprocess.run(_cmd(out, *extra), cwd=ROOT, capture_output=True, text=True, timeout=600, env=_env())
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    _run(out)
    return load_file(str(out / "head" / "head.safetensors"))


@pytest.mark.parametrize("seed", [0, 1])
def test_sigkill_then_resume_reaches_the_same_head(tmp_path, reference, seed):
    rng = random.Random(seed)
    kill_after_step = rng.choice([1, 2, 3])  # total 4 optimizer steps over 2 rounds
    out = tmp_path / "run"
    proc = subprocess.Popen(_cmd(out), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=_env())
    deadline = time.time() + 600
    target = out / "checkpoints" / f"step_{kill_after_step}"
    while not target.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(rng.uniform(0.0, 0.5))  # somewhere after that checkpoint: next step, saving, or collecting
    alive = proc.poll() is None
    if alive:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert alive, "the run finished before it could be killed"
    _run(out, "trainer.resume=true")
    final = load_file(str(out / "head" / "head.safetensors"))
    assert final.keys() == reference.keys()
    for k in final:
        torch.testing.assert_close(final[k], reference[k], atol=1e-6, rtol=1e-5)

"""Multi-GPU training command: deepspeed's launcher parses it, and train.py tolerates --local_rank=N."""

from __future__ import annotations

import sys

import pytest
from conftest import run_cmd

COMMAND = "deepspeed --num_gpus 2 train.py +experiment=diversed_gsm8k_tiny trainer.zero_stage=2"


def test_deepspeed_launcher_parses_the_command():
    runner = pytest.importorskip("deepspeed.launcher.runner")
    args = runner.parse_args(COMMAND.split()[1:])
    assert args.num_gpus == 2 and args.num_nodes == -1 and args.user_script == "train.py"
    assert args.user_args == ["+experiment=diversed_gsm8k_tiny", "trainer.zero_stage=2"]
    assert not args.no_local_rank  # so each rank gets --local_rank=<r> appended
    # the resources the launcher would use on an 8-GPU node: 2 local ranks
    assert runner.apply_num_nodes_and_gpus({"localhost": list(range(8))}, -1, 2) == {"localhost": [0, 1]}


@pytest.mark.parametrize("stage", [2, 3])
def test_train_py_accepts_local_rank_and_zero_stage(stage):
    # what deepspeed.launcher.launch runs on rank 1: python -u train.py <user args> --local_rank=1
    res = run_cmd([sys.executable, "-u", "train.py", "+experiment=diversed_gsm8k_tiny", f"trainer.zero_stage={stage}",
                   "--cfg", "job", "--resolve", "--local_rank=1"], timeout=120)
    assert f"zero_stage: {stage}" in res.stdout
    assert f"stage: {stage}" in res.stdout.split("deepspeed:", 1)[1]  # the DeepSpeed node follows

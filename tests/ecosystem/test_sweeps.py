"""Hydra launchers: a local joblib sweep runs every job; a failed job is marked and the sweep goes on."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import ROOT, run_cmd
from omegaconf import OmegaConf

from relaxspec.distributed import failed_jobs


def test_joblib_sweep_runs_both_jobs(tmp_path):
    res = run_cmd([sys.executable, "evaluate.py", "-m", "hydra/launcher=joblib", "method=ar,sd", "pair=tiny",
                   "dataset=smoke", "decode.max_new_tokens=4", "warmup=0", f"hydra.sweep.dir={tmp_path}"])
    assert "Joblib.Parallel(n_jobs=2" in res.stderr + res.stdout
    metrics = sorted(tmp_path.glob("*/metrics.json"))
    assert len(metrics) == 2
    assert sorted(next(iter(json.loads(p.read_text())["methods"])) for p in metrics) == ["ar", "sd"]


def test_failed_job_is_reported_and_sweep_goes_on(tmp_path):
    # 10^5 new tokens exceed the tiny pair's context: that job fails inside the harness, the other one runs
    res = run_cmd([sys.executable, "evaluate.py", "-m", "hydra/launcher=joblib", "method=ar", "pair=tiny",
                   "dataset=smoke", "decode.max_new_tokens=4,100000", "warmup=0", f"hydra.sweep.dir={tmp_path}"])
    assert "error: job failed" in res.stderr
    failed = failed_jobs(tmp_path)
    assert len(failed) == 1 and "max_new_tokens=100000" in failed[0][0].name
    assert failed[0][1].startswith("ConfigError: example smoke/0") and (failed[0][0] / "error.txt").is_file()
    assert len(list(tmp_path.glob("*/metrics.json"))) == 1


def test_launcher_configs_match_plugin_schemas():
    from hydra_plugins.hydra_joblib_launcher.config import JobLibLauncherConf
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

    for name, schema in (("joblib", JobLibLauncherConf), ("slurm", SlurmQueueConf)):
        node = OmegaConf.load(ROOT / "conf" / "hydra" / "launcher" / f"{name}.yaml")
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)  # unknown keys / wrong types raise
        assert set(node.keys()) == set(merged.keys()), name
        assert merged._target_ == schema._target_
    assert OmegaConf.load(Path(ROOT / "conf/hydra/launcher/joblib.yaml")).n_jobs == 2


def test_slurm_launcher_selectable():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("evaluate", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                          return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher") and cfg.hydra.launcher.partition == "gpu"
    assert cfg.hydra.launcher.gpus_per_node == 1

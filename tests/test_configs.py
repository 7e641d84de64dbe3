"""Every config file composes and validates; bad inputs fail before any work with one clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from relaxspec.config import CONF_DIR, ConfigError, validate

ROOT = CONF_DIR.parent
GROUPS = ["pair", "method", "dataset", "decode", "logger", "trainer"]


def _compose(config_name: str, overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize("group", GROUPS)
def test_every_group_option_composes(group):
    for option in _options(group):
        overrides = [f"{group}={option}"]
        if group == "method" and option == "asd":
            overrides.append("decode=greedy")
        cfg = _compose("train" if group == "trainer" else "evaluate", overrides)
        validate(cfg)


def test_every_experiment_composes():
    for exp in _options("experiment"):
        validate(_compose("train", [f"+experiment={exp}"]))


def test_every_sweep_composes():
    for sweep in sorted((ROOT / "sweeps").glob("*.yaml")):
        res = subprocess.run([sys.executable, "evaluate.py", "-cd", "sweeps", "-cn", sweep.stem, "--cfg", "job"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"{sweep.name}: {res.stderr[-2000:]}"


def test_methods_list_is_validated():
    validate(_compose("evaluate", ["methods=[ar,sd,static_ensemble,diversed]"]))
    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        validate(_compose("evaluate", ["methods=[ar,nope]"]))


@pytest.mark.parametrize(
    "override,needle",
    [
        ("decode.temperature=-1", "decode.temperature must be a finite number >= 0"),
        ("decode.temperature=nan", "decode.temperature must be a finite number >= 0"),
        ("pair=nonexistent", "pair"),
        ("method=nonexistent", "method"),
        ("decode.temprature=1", "temprature"),
        ("method=lossy method.lenience=0", "lenience"),
        ("method=static_ensemble method.w_draft=1.5", "w_draft"),
        ("method=asd", "greedy only"),
        ("decode.draft_length=0", "draft_length"),
        ("dataset.limit=0", "limit"),
        ("method=diversed method.head=/does/not/exist", "does not exist"),
    ],
)
def test_bad_inputs_fail_with_one_line(override, needle):
    res = subprocess.run([sys.executable, "evaluate.py", *override.split()], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error:") and needle in lines[0], lines[0]


def test_conf_dir_is_the_repo_conf():
    assert Path(CONF_DIR, "evaluate.yaml").is_file()

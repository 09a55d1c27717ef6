"""Every file in scripts/ answers --help with its usage and exit 0: a new user's first command.
Before, launch_grpo.sh and launch_sft.sh took --help for a missing experiment (exit 2) and
stages.sh printed nothing. Parametrized over the folder, so a new launcher without --help fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "scripts").iterdir() if p.is_file())


def _help(script: str, flag: str) -> subprocess.CompletedProcess[str]:
    runner = ["bash"] if script.endswith(".sh") else [sys.executable]
    return subprocess.run(
        [*runner, f"scripts/{script}", flag],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_every_script_is_covered() -> None:
    """The folder holds only launchers this test knows how to start."""
    assert SCRIPTS and all(name.endswith((".sh", ".py")) for name in SCRIPTS), SCRIPTS
    assert "train.sh" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_usage_and_exits_0(script: str) -> None:
    done = _help(script, "--help")
    assert done.returncode == 0, (script, done.stderr[-500:])
    assert "usage" in done.stdout.lower(), (script, done.stdout[:300])
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("script", [name for name in SCRIPTS if name.endswith(".sh")])
def test_short_help_too(script: str) -> None:
    done = _help(script, "-h")
    assert done.returncode == 0 and "usage" in done.stdout.lower(), (script, done.stderr)


def test_train_help_lists_experiments_and_environment() -> None:
    done = _help("train.sh", "--help")
    for word in ("countdown_qwen3_4b", "gsm8k_qwen2_5_3b", "RAY_ADDRESS", "RLVR_STRICT_MEMORY"):
        assert word in done.stdout
    assert "--print_config" in done.stdout
    assert "grpo\n" not in done.stdout  # the base config is not an experiment


def test_a_missing_experiment_is_still_refused() -> None:
    """Negative control: --help is a flag, not a way around the one-line refusal."""
    done = subprocess.run(
        ["bash", "scripts/train.sh"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "no experiment given" in done.stderr


def test_print_config_prints_the_composed_config_and_runs_nothing(tmp_path: Path) -> None:
    """--print_config is taken out of the overrides (Hydra would refuse it) wherever it is."""
    done = subprocess.run(
        ["bash", "scripts/train.sh", "countdown_cpu", "trainer.total_training_steps=7",
         "--print_config", f"paths.checkpoints={tmp_path}/ckpt"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "  total_training_steps: 7\n" in done.stdout
    assert f"default_local_dir: {tmp_path}/ckpt/" in done.stdout  # resolved, as the run gets it
    assert "pre-flight" not in done.stdout + done.stderr and not (tmp_path / "ckpt").exists()

"""A real 2x2 GRPO sweep on CPU: scripts/sweep.py runs verl four times (tiny model with LoRA,
lora_rank x lr as in the TuFT guide, 2 steps each), then the table, the figures and the wandb
grouping are checked. Slow; CI runs it.

The sweep runs in its own process group with a hard timeout and its own Ray temp dir; only Ray
processes under that temp dir are cleaned up afterwards.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import run_bounded
from wandb_run_file import offline_runs

from rlvr.report.metrics_log import read_steps

ROOT = Path(__file__).resolve().parents[1]
SWEEP_TIMEOUT_S = 1500
pytestmark = [pytest.mark.slow, pytest.mark.no_cuda]  # the CPU path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory):
    from rlvr.models.tiny import build_model
    from rlvr.tasks.countdown import prepare

    work = tmp_path_factory.mktemp("sweep")
    prepare("generate", str(work / "data/countdown"), train_size=32, test_size=8, seed=0)
    build_model(work / "models/tiny")
    ray_tmp = tempfile.mkdtemp(prefix="rlvr-ray-", dir="/tmp")  # Ray sockets need short paths
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("WANDB_API_KEY", None)
    cmd = [
        sys.executable,
        str(ROOT / "scripts/sweep.py"),
        "--experiment=countdown_cpu",
        "--name=mini",
        f"--out={work}/sweeps",
        "--grid=lora_rank=4,8",
        "--grid=lr=1e-5,1e-4",
        "--timeout_h=0.25",
        "adapter=lora32",
        "actor_rollout_ref.model.lora_alpha=16",
        f"paths.data={work}/data",
        f"actor_rollout_ref.model.path={work}/models/tiny",
        "trainer.total_training_steps=2",
        "trainer.test_freq=2",
        # the random model never earns a reward; an entropy bonus guarantees a real gradient
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
    ]
    output = run_bounded(cmd, env, SWEEP_TIMEOUT_S, ray_tmp)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    return work / "sweeps/mini", output


POINTS = ["lora_rank4_lr1e-5", "lora_rank4_lr1e-4", "lora_rank8_lr1e-5", "lora_rank8_lr1e-4"]


def test_every_point_trains_and_is_recorded(sweep) -> None:
    sweep_dir, _ = sweep
    for name in POINTS:
        status = json.loads((sweep_dir / "runs" / name / "status.json").read_text())
        assert status["state"] == "finished", status
        log = (sweep_dir / "runs" / name / "output.log").read_text()
        assert f"trainer.experiment_name=mini__{name}" in log
        assert "step:2 - " in log
        # the per-step JSON lines the sweep scores from (verl's file logger, paths.metrics)
        records = read_steps(sweep_dir / "runs" / name / "metrics.jsonl")
        assert [r.step for r in records] == [0, 1, 2]
        assert all("critic/score/mean" in r.metrics for r in records[1:])
    assert not list(sweep_dir.glob("runs/*/checkpoints"))  # save_freq=-1 unless asked


def test_table_and_figures(sweep) -> None:
    sweep_dir, _ = sweep
    with (sweep_dir / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["run"] for r in rows] == POINTS
    for row in rows:
        assert row["state"] == "finished" and row["steps"] == "2"
        assert 0.0 <= float(row["final_reward"]) <= 1.0
        assert row["best_val"] != ""  # validation ran at step 2
    assert "| lora_rank8_lr1e-4 | 8 | 1e-4 | finished |" in ((sweep_dir / "results.md").read_text())
    for png in ("final_reward_vs_lr.png", "reward_curves.png"):
        data = (sweep_dir / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_wandb_runs_share_a_group_and_carry_grid_values(sweep) -> None:
    sweep_dir, _ = sweep
    for name in POINTS:
        (run,) = offline_runs(sweep_dir / "runs" / name / "wandb")
        group, config = run.group, run.config
        assert group == "mini"
        rank, lr = name.removeprefix("lora_rank").split("_lr")
        assert config["sweep"] == {"name": "mini", "lora_rank": int(rank), "lr": float(lr)}
        assert config["actor_rollout_ref"]["model"]["lora_rank"] == int(rank)
        assert config["actor_rollout_ref"]["actor"]["optim"]["lr"] == float(lr)


def test_rerun_skips_finished_points(sweep) -> None:
    sweep_dir, _ = sweep
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/plot_sweep.py"),
            str(sweep_dir),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "final_reward_vs_lr.png" in result.stdout
    from rlvr.sweep.grid import SweepSpec, parse_grid
    from rlvr.sweep.runner import run_sweep

    spec = SweepSpec(
        "mini",
        "countdown_cpu",
        parse_grid(["lora_rank=4,8", "lr=1e-5,1e-4"]),
        json.loads((sweep_dir / "sweep.json").read_text())["overrides"],
    )
    lines: list[str] = []
    run_sweep(spec, sweep_dir, launcher=Path("/nonexistent"), echo=lines.append)
    assert sum("skipped" in line for line in lines) == 4

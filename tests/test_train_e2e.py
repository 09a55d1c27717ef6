"""Real verl + Ray GRPO on CPU with the tiny model: train, checkpoint, wandb, resume, clean exit.

Slow (a few minutes on 2 cores); CI runs it. Every run has a hard timeout, runs in its own
process group with its own Ray temp dir, and only processes under that temp dir are cleaned up.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import countdown_workdir, cpu_launch, run_bounded, wandb_records
from wandb_run_file import VERL_AND_TINKER_METRICS, history_rows

from rlvr.report.metrics_log import read_steps

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 900
pytestmark = [pytest.mark.slow, pytest.mark.no_cuda]  # the CPU path


def _run(cmd: list[str], env: dict[str, str], ray_tmp: str) -> str:
    return run_bounded(cmd, env, RUN_TIMEOUT_S, ray_tmp)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return countdown_workdir(tmp_path_factory, "e2e", train_size=32, test_size=8)


@pytest.fixture(scope="module")
def ray_tmp():
    # Short path: Ray's socket paths must stay under 107 characters.
    path = tempfile.mkdtemp(prefix="rlvr-ray-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _launch(work: Path, ray_tmp: str, steps: int) -> str:
    cmd, env = cpu_launch(work, "e2e")
    cmd += [
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=1",
        "trainer.test_freq=2",
        # the random model never earns a reward; an entropy bonus guarantees a real gradient
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
    ]
    return _run(cmd, env, ray_tmp)


def _metric(output: str, step: int, name: str) -> float:
    match = re.search(rf"step:{step} - .*?{re.escape(name)}:([-0-9.e]+)", output)
    assert match, f"{name} at step {step} not in the log"
    return float(match.group(1))


@pytest.fixture(scope="module")
def first_run(workdir: Path, ray_tmp: str) -> str:
    return _launch(workdir, ray_tmp, steps=2)


def test_two_grpo_steps_with_validation(first_run: str) -> None:
    assert "pre-flight: countdown_cpu ok" in first_run
    assert "wandb: offline mode" in first_run
    assert "val-core/countdown/acc/mean@1" in first_run  # validation before and after training
    for step in (1, 2):
        assert _metric(first_run, step, "critic/score/mean") >= 0.0
        assert _metric(first_run, step, "actor/grad_norm") > 0.0


def test_checkpoint_loads_and_weights_moved(workdir: Path, first_run: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf_dir = workdir / "checkpoints/e2e/global_step_2/actor/huggingface"
    trained = AutoModelForCausalLM.from_pretrained(hf_dir)
    AutoTokenizer.from_pretrained(hf_dir)
    start = AutoModelForCausalLM.from_pretrained(workdir / "models/tiny")
    trained_state, start_state = trained.state_dict(), start.state_dict()
    assert trained_state.keys() == start_state.keys()
    moved = max((trained_state[k] - start_state[k]).abs().max().item() for k in start_state)
    assert moved > 1e-6, moved


def test_wandb_offline_run_holds_the_metrics(workdir: Path, first_run: str) -> None:
    runs = list((workdir / "logs/wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1, runs
    history, kinds = _records(runs[0])
    steps = {row.get("training/global_step") for row in history}
    assert {1, 2} <= steps, history  # every training step reached the run file
    assert all("critic/score/mean" in row for row in history if row.get("training/global_step"))
    assert "exit" in kinds  # the run was finished, not cut off at process exit
    # The names a Tinker run of the recipe shares with it on the dashboard (test_tinker_e2e).
    logged = {key for row in history for key in row}
    assert set(VERL_AND_TINKER_METRICS) - logged == set()


def test_metrics_json_lines_hold_every_step(workdir: Path, first_run: str) -> None:
    """verl's file logger (configs/grpo.yaml) wrote paths.metrics, beside the checkpoints."""
    assert f"file logger: appending to {workdir}/checkpoints/e2e/metrics.jsonl" in first_run
    records = read_steps(workdir / "checkpoints/e2e/metrics.jsonl")
    assert [r.step for r in records] == [0, 1, 2]
    for record in records[1:]:
        assert record.metrics["critic/score/mean"] >= 0.0
        assert record.metrics["actor/grad_norm"] > 0.0
        assert record.metrics["global_seqlen/min"] > 0  # a tensor in verl: the file logger fix
    assert "val-core/countdown/acc/mean@1" in records[0].metrics  # before training
    assert "val-core/countdown/acc/mean@1" in records[2].metrics  # test_freq=2


def test_run_ends_with_a_report_rollout_dumps_and_wandb_tables(
    workdir: Path, first_run: str
) -> None:
    """configs/grpo.yaml's rollout dumps (bounded by the recipes' trainer), the run report the
    entry point writes in the driver when training ends, and validation generations in wandb."""
    run = workdir / "checkpoints/e2e"
    dumps = sorted(run.glob("rollouts/*.jsonl"))
    assert [p.name for p in dumps] == ["1.jsonl", "2.jsonl"]
    rows = [json.loads(line) for line in dumps[0].read_text().splitlines()]
    assert len(rows) == 4 and {"input", "output", "score", "acc"} <= rows[0].keys()
    assert f"rlvr: run report {run}/report.md" in first_run
    assert "reward.png" in (run / "report.md").read_text()
    (run_file,) = (workdir / "logs/wandb").glob("offline-run-*/run-*.wandb")
    keys = {key for row in history_rows(run_file) for key in row}
    assert any(key.startswith("val/generations/") for key in keys)


def test_eval_cli_reads_the_checkpoint(workdir: Path, first_run: str) -> None:
    """The eval CLI on the real verl ``actor/huggingface`` layout: reward, then analyse."""
    import sys

    checkpoint = workdir / "checkpoints/e2e/global_step_2/actor/huggingface"
    for command, extra in (("reward", []), ("analyse", ["--rollout_n", "2"])):
        done = subprocess.run(
            [
                sys.executable,
                "scripts/eval_countdown.py",
                "--model_path",
                str(checkpoint),
                "--data",
                str(workdir / "data/countdown/test.parquet"),
                "--max_tokens",
                "8",
                "--quiet",
                "--output",
                str(workdir / f"eval_{command}"),
                command,
                *extra,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads((workdir / f"eval_{command}/summary.json").read_text())
        assert summary["model"] == str(checkpoint) and summary["prompts"] == 8


def test_resume_runs_step_three(workdir: Path, ray_tmp: str, first_run: str) -> None:
    metrics = workdir / "checkpoints/e2e/metrics.jsonl"
    with metrics.open("a") as handle:  # a run killed while writing its next line
        handle.write('{"step": 3, "data": {"actor/entro')
    output = _launch(workdir, ray_tmp, steps=3)
    assert f"dropped a torn last line (33 bytes) of {metrics}" in output
    assert "Load from checkpoint folder" in output and "global_step_2" in output
    assert re.search(r"step:3 - .*actor/entropy", output)
    # steps 1 and 2 are not trained again (a validation line at step 2 is expected on resume)
    assert not re.search(r"step:[12] - .*actor/entropy", output)
    assert (workdir / "checkpoints/e2e/global_step_3/actor/huggingface/model.safetensors").is_file()
    # the resumed run appended to the same JSON lines: the first run's steps are still there
    records = read_steps(workdir / "checkpoints/e2e/metrics.jsonl")
    assert [r.step for r in records] == [0, 1, 2, 3]
    assert "actor/entropy" in records[1].metrics and "actor/entropy" in records[3].metrics
    # max_actor_ckpt_to_keep=2 holds across the resume: verl alone kept steps 1, 2 and 3
    kept = sorted(p.name for p in (workdir / "checkpoints/e2e").glob("global_step_*"))
    assert kept == ["global_step_2", "global_step_3"], kept
    assert "max_actor_ckpt_to_keep=2: removed global_step_1" in output
    # the report knows the run's plan: the resumed run planned 3 steps and logged them all
    assert "rlvr: run status: complete: 3 of 3 steps logged" in output
    assert "**Status: complete: 3 of 3 steps logged" in (metrics.parent / "report.md").read_text()


def _records(run_file: Path) -> tuple[list[dict], set[str]]:
    """An offline wandb run's logged steps, and the record types in its log."""
    rows, kinds = [], set()
    for kind, record in wandb_records(run_file):
        kinds.add(kind)
        if kind == "history":
            items = record.history.item
            rows.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in items
                }
            )
    return rows, kinds

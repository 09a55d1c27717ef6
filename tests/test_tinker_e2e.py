"""The Tinker recipe end to end against TuFT 0.2.2's real server on 127.0.0.1 (tests/tuft_server.py
starts it in its CPU test mode, from an environment of its own): ``bash scripts/train.sh`` for
2 steps on generated Countdown data, a third step after a resume and after a kill, and a 2x2
sweep with its figure. Every request goes through TuFT's own request validation and futures: the
server's log must show no failed future.

What this does not prove: TuFT's CPU test mode swaps its model for a 16-weight toy (samples
count up from the prompt's last token), so no language model is sampled or trained here, and
its checkpoints hold metadata, not adapter weights (the downloaded adapter is its metadata).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tuft_server import EXPERIMENT, RUN_TIMEOUT_S, TuftServer, launch_env, overrides

from rlvr.common.paths import ROOT
from rlvr.report.metrics_log import read_log

pytestmark = [pytest.mark.slow, pytest.mark.extra("tinker")]


@pytest.fixture(scope="module")
def work(tinker_dir: Path) -> Path:
    return tinker_dir


@pytest.fixture(scope="module")
def server(tuft: TuftServer) -> TuftServer:
    return tuft


def train(server: TuftServer, work: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts/train.sh"), EXPERIMENT, *args], capture_output=True,
        text=True, env=launch_env(server, work), timeout=RUN_TIMEOUT_S, cwd=ROOT,
    )  # fmt: skip


def ledger_steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "checkpoints.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


def test_train_two_steps_resume_a_third_after_a_kill(server: TuftServer, work: Path) -> None:
    run_dir = work / "runs/resumed"
    first = train(server, work, overrides(work, "resumed", 2))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert (
        "pre-flight: countdown_qwen3_4b_tinker ok (task countdown, through the Tinker API"
        in first.stdout
    )
    log = read_log(run_dir / "metrics.jsonl")
    assert [s.step for s in log.steps] == [0, 1, 2] and log.notes == []
    assert "val-core/countdown/acc/mean@1" in log.steps[0].metrics
    assert {"critic/score/mean", "actor/pg_loss", "response_length/clip_ratio"} <= set(
        log.steps[1].metrics
    )
    assert ledger_steps(run_dir) == [1, 2]
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text() == "2"
    rollout = json.loads((run_dir / "rollouts/1.jsonl").read_text().splitlines()[0])
    assert {"input", "output", "gts", "score", "acc", "response_length", "truncated"} <= set(
        rollout
    )
    assert len((run_dir / "rollouts/1.jsonl").read_text().splitlines()) == 2 * 4
    report = (run_dir / "report.md").read_text()
    assert "Alarms:" in report
    assert (run_dir / "adapter/metadata.json").is_file()  # the last checkpoint, downloaded
    # The launcher's supervisor teed the loop's output to the run's log, as it does verl's.
    launch_log = Path(first.stdout.split("log: ", 1)[1].split("\n", 1)[0])
    assert "tinker: step 2/2, score" in launch_log.read_text()

    # A third step: started, killed (the whole process group, no clean-up), started again.
    command = ["bash", str(ROOT / "scripts/train.sh"), EXPERIMENT, *overrides(work, "resumed", 3)]
    killed = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=launch_env(server, work), cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    assert killed.stdout is not None
    deadline = time.monotonic() + RUN_TIMEOUT_S
    seen = ""
    while "resuming from step 2" not in seen and time.monotonic() < deadline:
        line = killed.stdout.readline()
        if not line:
            break
        seen += line
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    assert "resuming from step 2" in seen, seen[-3000:]
    last = ledger_steps(run_dir)[-1]
    again = train(server, work, overrides(work, "resumed", 3))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resuming from step {last}" in again.stdout
    log = read_log(run_dir / "metrics.jsonl")
    assert [s.step for s in log.steps] == [0, 1, 2, 3] and log.notes == []
    assert ledger_steps(run_dir)[-1] == 3
    # Every request's future completed on the server: none failed its validation or its run.
    server_log = server.log.read_text()
    assert "Future failed" not in server_log
    assert server_log.count("Future completed") >= 2 * 3  # forward_backward + optim_step a step


def test_sweep_of_lora_rank_and_lr_draws_the_reward_figure(server: TuftServer, work: Path) -> None:
    env = launch_env(server, work)
    sweep = subprocess.run(
        ["uv", "run", "--no-sync", "scripts/sweep.py", "--experiment", EXPERIMENT,
         "--name", "grid", "--out", str(work / "sweeps"), "--grid", "lora_rank=8,16",
         "--grid", "lr=1e-5,1e-4", *overrides(work, "grid", 1)],
        capture_output=True, text=True, env=env, timeout=4 * RUN_TIMEOUT_S, cwd=ROOT,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    folder = work / "sweeps/grid"
    assert (folder / "reward_curves.png").stat().st_size > 1000
    points = sorted(p.name for p in (folder / "runs").iterdir())
    assert points == sorted(f"lora_rank{r}_lr{lr}" for r in (8, 16) for lr in ("1e-5", "1e-4"))
    for point in points:
        assert [s.step for s in read_log(folder / "runs" / point / "metrics.jsonl").steps] == [0, 1]

"""The Tinker recipe end to end against TuFT 0.2.2's real server on 127.0.0.1 (tests/tuft_server.py
starts it in its CPU test mode, from rlvr/tinker/tuft_env.py's environment): ``bash
scripts/train.sh`` for 2 steps on generated Countdown data, a third step after a resume and after
a kill, a rerun of the finished run, and a 2x2 sweep with its figure. Every request goes through
TuFT's own request validation and futures: the server's log must show no failed future.

WandB, offline, read back from wandb's own run files (tests/wandb_run_file.py) against the run
folder's metrics.jsonl: the same steps, keys and values; the composed config; verl's
``val/generations`` table; the metric names a verl run of the recipe logs too
(test_train_e2e checks the verl side); one run continued across a kill and a resume; a sweep's
points in one group.

What this does not prove: TuFT's CPU test mode swaps its model for a 16-weight toy (samples
count up from the prompt's last token), so no language model is sampled or trained here, and
its checkpoints hold metadata, not adapter weights (the downloaded adapter is its metadata).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from omegaconf import OmegaConf
from tuft_server import EXPERIMENT, RUN_TIMEOUT_S, Proxy, TuftServer, launch_env, overrides
from wandb_run_file import VERL_AND_TINKER_METRICS, WandbRun, offline_runs

from rlvr.common.paths import ROOT
from rlvr.config.compose import compose
from rlvr.report.metrics_log import read_log

pytestmark = [pytest.mark.slow, pytest.mark.extra("tinker")]


@pytest.fixture(scope="module")
def work(tinker_dir: Path) -> Path:
    return tinker_dir


@pytest.fixture(scope="module")
def server(tuft: TuftServer) -> TuftServer:
    return tuft


def train(
    server: TuftServer, work: Path, args: list[str], url: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = launch_env(server, work) | ({"TINKER_BASE_URL": url} if url else {})
    return subprocess.run(
        ["bash", str(ROOT / "scripts/train.sh"), EXPERIMENT, *args], capture_output=True,
        text=True, env=env, timeout=RUN_TIMEOUT_S, cwd=ROOT,
    )  # fmt: skip


def wandb_runs(work: Path, name: str) -> list[WandbRun]:
    """The offline WandB runs the launcher wrote for the run ``name``, oldest first."""
    return [run for run in offline_runs(work / "logs/wandb") if run.name == name]


def same(a: Any, b: Any) -> bool:
    return (math.isnan(a) and math.isnan(b)) if isinstance(a, float) and a != a else a == b


def check_wandb_mirrors_metrics(runs: list[WandbRun], metrics: Path) -> None:
    """Each step of metrics.jsonl is one WandB row (in one of ``runs``) with the same keys and
    values, and WandB holds no other step; wandb's own keys and the table's are left out."""
    steps = [step for run in runs for step in run.steps]
    logged = read_log(metrics).steps
    assert steps == [record.step for record in logged]  # in order, none twice
    rows = {step: row for run in runs for step, row in run.steps.items()}
    for record in logged:
        row = {k: v for k, v in rows[record.step].items()
               if not k.startswith(("_", "val/generations/"))}  # fmt: skip
        assert set(row) == set(record.metrics), record.step
        assert all(same(row[k], v) for k, v in record.metrics.items()), record.step


def check_generations_table(run_file_dir: Path, run: WandbRun, work: Path, steps: list[int]):
    """verl's ``val/generations`` table at each validation step; the last one holds a row per
    validation, each the 4 held-out prompts (their user message inside the rendered input), the
    responses and scores, whose mean is the step's logged validation reward."""
    tabled = [step for step, row in run.steps.items() if "val/generations/path" in row]
    assert tabled == steps
    last = run.steps[steps[-1]]
    table = json.loads((run_file_dir / "files" / last["val/generations/path"]).read_text())
    assert table["columns"] == ["step"] + [
        f"{column}_{i}" for i in range(1, 5) for column in ("input", "output", "score")
    ]
    assert [row[0] for row in table["data"]] == steps
    held_out = pd.read_parquet(work / "data/countdown/test.parquet").head(4)
    messages = {str(prompt[-1]["content"]) for prompt in held_out["prompt"]}
    for row, step in zip(table["data"], steps, strict=True):
        inputs, scores = row[1::3], row[3::3]
        assert {m for m in messages if any(m in text for text in inputs)} == messages
        reward = run.steps[step]["val-aux/countdown/reward/mean@1"]
        assert sum(scores) / len(scores) == pytest.approx(reward)


def ledger_steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "checkpoints.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


EXPORT, ARCHIVE = "POST /api/v1/save_weights_for_sampler", "/archive"


def rerun_through(proxy: Proxy, args: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The run again, in-process (the launcher's run function, as the dropped-connection test
    calls the loop) with its requests through ``proxy``; the requests it sent."""
    from rlvr.tinker import train as tinker_train

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_BASE_URL", proxy.url)
        assert tinker_train.run(EXPERIMENT, args) == 0, capsys.readouterr().err[-3000:]
    proxy.cut()
    return proxy.requests()


def check_a_rerun_sends_nothing(
    server: TuftServer, work: Path, name: str, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A finished run's rerun sends no export of the adapter and no request for its download
    address: counted by a proxy in front of the server and in the server's own log (the export
    is a checkpoint save there). The negative control: the same rerun with the adapter's record
    gone sends one of each."""
    run_dir, port = work / "runs" / name, int(server.url.rsplit(":", 1)[1])
    step = json.loads((run_dir / "adapter.json").read_text())["step"]
    exported = f"/{name}_adapter_{step}\n"  # TuFT's "Checkpoint save begin" and "saved" lines
    exports, runs = server.log.read_text().count(exported), len(wandb_runs(work, name))
    assert exports >= 2
    sent = rerun_through(Proxy(port), args, capsys)
    assert "already trained, and its adapter is in" in capsys.readouterr().out
    assert [r for r in sent if r == EXPORT or r.endswith(ARCHIVE)] == []
    assert server.log.read_text().count(exported) == exports
    assert len(wandb_runs(work, name)) == runs  # and no empty WandB run

    (run_dir / "adapter.json").unlink()
    sent = rerun_through(Proxy(port), args, capsys)
    assert (sent.count(EXPORT), sum(r.endswith(ARCHIVE) for r in sent)) == (1, 1), sent
    assert server.log.read_text().count(exported) == exports + 2


def test_train_two_steps_resume_a_third_after_a_kill_rerun_it_finished(
    server: TuftServer, work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
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

    # WandB, offline: one run, named and configured as verl names and configures its runs.
    (run,) = wandb_runs(work, "resumed")
    assert (run.project, run.group, run.exit_code) == ("rlvr-recipes", "", 0)
    assert run.run_id == (run_dir / "wandb_run_id.txt").read_text().strip()
    composed = OmegaConf.to_container(compose(EXPERIMENT, overrides(work, "resumed", 2)),
                                      resolve=True)  # fmt: skip
    assert run.config == json.loads(json.dumps(composed))
    check_wandb_mirrors_metrics([run], run_dir / "metrics.jsonl")
    assert set(VERL_AND_TINKER_METRICS) - {k for row in run.steps.values() for k in row} == set()
    (run_file,) = (work / "logs/wandb").glob(f"offline-run-*-{run.run_id}/run-*.wandb")
    check_generations_table(run_file.parent, run, work, [0, 2])

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
    # The resumed run continued its WandB run: the same id, step 3 after steps 0-2 and no
    # step twice (offline, wandb writes the continuation to a folder of its own).
    runs = wandb_runs(work, "resumed")
    assert {r.run_id for r in runs} == {run.run_id} and len(runs) >= 2
    assert [sorted(runs[0].steps), sorted(runs[-1].steps)] == [[0, 1, 2], [3]]
    check_wandb_mirrors_metrics(runs, run_dir / "metrics.jsonl")
    # Every request's future completed on the server: none failed its validation or its run.
    server_log = server.log.read_text()
    assert "Future failed" not in server_log
    assert server_log.count("Future completed") >= 2 * 3  # forward_backward + optim_step a step
    for variable, value in launch_env(server, work).items():  # as the launcher ran it
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv("WANDB_DIR", str(work / "logs"))
    check_a_rerun_sends_nothing(server, work, "resumed", overrides(work, "resumed", 3), capsys)


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
    # One WandB group, the sweep's, holding its four points, each its own run.
    runs = [run for point in points for run in offline_runs(folder / "runs" / point / "wandb")]
    assert sorted(run.name for run in runs) == [f"grid__{point}" for point in points]
    assert {run.group for run in runs} == {"grid"} and len({run.run_id for run in runs}) == 4
    for run in runs:
        rank = run.config["actor_rollout_ref"]["model"]["lora_rank"]
        assert run.name.startswith(f"grid__lora_rank{rank}_")

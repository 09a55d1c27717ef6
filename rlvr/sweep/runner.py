"""Running a sweep: one launcher run per grid point, one after another, each bounded in time.

Each point runs ``scripts/train.sh`` (or, with ``ray_address``, a ``ray job submit`` of it)
with the grid values as Hydra overrides, ``paths.metrics`` pointing at its own
``runs/<point>/metrics.jsonl`` (verl's ``file`` logger) and its launcher output in
``output.log`` (see ``rlvr.sweep.folder`` for the layout). A point is finished when the launcher
exits 0 and the run logged at least one step; a failed point is recorded and the sweep goes on,
and a rerun skips the finished ones.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.common.paths import ROOT
from rlvr.common.processes import RAY_CLI
from rlvr.common.signals import interrupt_signal
from rlvr.common.supervision import STOP_WITH_PARENT_ENV
from rlvr.report.metrics_log import StepRecord
from rlvr.sweep.folder import (
    METRICS_FILE,
    OUTPUT_LOG,
    STATUS_FILE,
    RunStatus,
    load_records,
    prepare_sweep_dir,
    run_dir,
)
from rlvr.sweep.grid import GridPoint, SweepError, SweepSpec, grid_points
from rlvr.sweep.history import summarise_history
from rlvr.sweep.tables import fmt

LAUNCHER = ROOT / "scripts" / "train.sh"
ERROR_LINE = re.compile(r"(Error|Exception|error:|FAILED|Traceback|problem)")


@dataclass(frozen=True)
class LaunchOptions:
    launcher: Path = LAUNCHER
    ray_address: str | None = None  # submit each point as a Ray job to this cluster
    timeout_s: float = 24 * 3600  # per point
    env: dict[str, str] = field(default_factory=dict)  # on top of this process's environment


def checked_points(spec: SweepSpec) -> list[GridPoint]:
    """The grid's points, each composed and put through verl's own config checks first, so a
    typo or an indivisible batch fails before the first run rather than after N of them."""
    from rlvr.config.compose import ConfigError, check_experiment, compose_checked
    from rlvr.preflight.checks import numeric_problems, verl_problems

    try:
        check_experiment(spec.experiment)
    except ConfigError as exc:
        raise SweepError(f"--experiment: {exc}") from None
    points = grid_points(spec.grid)
    for point in points:
        try:
            config = compose_checked(spec.experiment, [*spec.overrides, *point.overrides])
        except ConfigError as exc:
            raise SweepError(f"point {point.name} is not a valid config: {exc}") from None
        # pre-flight's numeric checks (rollout.n=0 fails only inside Ray), then verl's own
        problems = numeric_problems(config) or verl_problems(config)
        if problems:
            raise SweepError(f"point {point.name} is not a valid config: {problems[0]}")
    return points


def point_overrides(spec: SweepSpec, point: GridPoint, folder: Path) -> list[str]:
    """What one point passes to the launcher after the experiment name."""
    overrides = [
        *spec.overrides,
        *point.overrides,
        f"trainer.experiment_name={spec.name}__{point.name}",
        f"trainer.default_local_dir={folder / 'checkpoints'}",
        f"paths.metrics={folder / METRICS_FILE}",  # the per-step JSON lines the sweep reads
        # Beside them, so the run report (written when training ends) finds both.
        f"paths.rollouts={folder / 'rollouts'}",
        # The grid values as their own config block, so wandb can chart and filter by them.
        f"+sweep.name={spec.name}",
        *(f"+sweep.{axis.split('.')[-1]}={value}" for axis, value in point.values.items()),
    ]
    if not spec.keep_checkpoints:  # a 4B checkpoint per grid point adds up fast
        overrides.append("trainer.save_freq=-1")
    return overrides


def launch_command(
    spec: SweepSpec,
    point: GridPoint,
    folder: Path,
    launcher: Path = LAUNCHER,
    ray_address: str | None = None,
) -> list[str]:
    """The launcher call for one point; as a Ray job on a cluster when ``ray_address`` is set."""
    command = ["bash", str(launcher), spec.experiment, *point_overrides(spec, point, folder)]
    if ray_address is None:
        return command
    env_vars = {"RLVR_LOG_DIR": str(folder), "WANDB_RUN_GROUP": spec.name}
    return [
        RAY_CLI,
        "job",
        "submit",
        f"--address={ray_address}",
        f"--submission-id={spec.name}__{point.name}__{int(time.time())}",
        f"--runtime-env-json={json.dumps({'env_vars': env_vars})}",
        "--",
        *command,
    ]


def failure_reason(returncode: int | None, output: str) -> str:
    """The last error-looking line of a failed run's output, with the exit code."""
    if returncode is None:
        return "timed out"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [
        line for line in lines if ERROR_LINE.search(line) and not line.startswith("Traceback")
    ]
    detail = (errors or lines or ["no output"])[-1]
    return f"exit {returncode}: {detail[:300]}"


def _run_once(
    command: list[str], env: dict[str, str], log_path: Path, timeout_s: float
) -> int | None:
    """Run in its own process group, output appended to ``log_path``; None when it timed out."""
    with log_path.open("a") as log:
        log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} $ {' '.join(command)}\n")
        log.flush()
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a timeout stops this run's processes and nothing else
        )
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return None
        except BaseException:  # Ctrl-C: the run's own session would not see it and outlive us
            _stop_group(proc)
            raise


def _stop_ray_job(command: list[str], ray_address: str, log_path: Path) -> None:
    """Stopping ``ray job submit`` only stops the client tailing the logs; the job itself
    keeps the cluster busy until ``ray job stop``."""
    submission = next(a.split("=", 1)[1] for a in command if a.startswith("--submission-id="))
    with log_path.open("a") as log:
        subprocess.run(
            [RAY_CLI, "job", "stop", f"--address={ray_address}", submission],
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=False,
        )


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the run's process group, SIGKILL it if it is not gone after 30 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _verdict(
    returncode: int | None,
    interrupted: KeyboardInterrupt | None,
    records: list[StepRecord],
    output_log: Path,
) -> tuple[int | None, str]:
    """The point's exit code as recorded, and why it failed ("" when it finished)."""
    if interrupted is not None:
        name = signal.Signals(interrupt_signal(interrupted)).name
        return returncode, f"interrupted ({name}): the sweep was stopped during this point"
    if returncode == 0:
        return (0, "") if records else (1, f"exit 0 but no training step in {METRICS_FILE}")
    output = output_log.read_text(errors="replace")[-20000:]
    return returncode, failure_reason(returncode, output)


def _run_point(
    spec: SweepSpec, point: GridPoint, folder: Path, options: LaunchOptions
) -> tuple[RunStatus, list[StepRecord]]:
    """Launch one point and record its status; Ctrl-C is recorded, then raised again."""
    folder.mkdir(parents=True, exist_ok=True)
    if not spec.keep_checkpoints:  # nothing to resume from: a retry starts a new history
        (folder / METRICS_FILE).unlink(missing_ok=True)
    command = launch_command(spec, point, folder, options.launcher, options.ray_address)
    env = {
        **os.environ,
        **options.env,
        "RLVR_LOG_DIR": str(folder),  # the launcher's log and wandb files land here
        "WANDB_RUN_GROUP": spec.name,
        # The point stops when the sweep dies, even by SIGKILL (the launcher asks the kernel).
        STOP_WITH_PARENT_ENV: str(os.getpid()),
    }
    started = time.monotonic()
    interrupted: KeyboardInterrupt | None = None
    try:
        returncode = _run_once(command, env, folder / OUTPUT_LOG, options.timeout_s)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (scripts/sweep.py)
        interrupted, returncode = exc, None
    if returncode is None and options.ray_address is not None:  # timed out or interrupted
        _stop_ray_job(command, options.ray_address, folder / OUTPUT_LOG)
    seconds = round(time.monotonic() - started, 1)
    records = load_records(folder)
    returncode, reason = _verdict(returncode, interrupted, records, folder / OUTPUT_LOG)
    status = RunStatus(
        name=point.name,
        values=point.values,
        state="finished" if returncode == 0 else "failed",
        returncode=returncode,
        reason=reason,
        seconds=seconds,
        command=command,
    )
    status.save(folder / STATUS_FILE)
    if interrupted is not None:
        raise interrupted
    return status, records


def _outcome(label: str, status: RunStatus, records: list[StepRecord]) -> str:
    if status.state != "finished":
        return f"{label}: FAILED after {status.seconds:.0f} s: {status.reason}"
    summary = summarise_history(records)
    return (
        f"{label}: finished in {status.seconds:.0f} s, final reward "
        f"{fmt(summary.final_reward)}{' (collapsed)' if summary.collapsed else ''}"
    )


def run_sweep(
    spec: SweepSpec,
    sweep_dir: Path,
    launcher: Path = LAUNCHER,
    ray_address: str | None = None,
    timeout_s: float = 24 * 3600,
    env: dict[str, str] | None = None,
    echo: Callable[[str], None] = print,
) -> list[RunStatus]:
    """Run every point not finished yet, one after another; a failed point does not stop it."""
    options = LaunchOptions(launcher, ray_address, timeout_s, env or {})
    spec = prepare_sweep_dir(spec, sweep_dir)
    points = grid_points(spec.grid)
    statuses = []
    for number, point in enumerate(points, start=1):
        folder = run_dir(sweep_dir, point)
        label = f"[{number}/{len(points)}] {point.name}"
        previous = RunStatus.load(folder / STATUS_FILE)
        if previous is not None and previous.state == "finished":
            echo(f"{label}: finished earlier, skipped")
            statuses.append(previous)
            continue
        echo(f"{label}: running (log: {folder / OUTPUT_LOG})")
        status, records = _run_point(spec, point, folder, options)
        statuses.append(status)
        echo(_outcome(label, status, records))
    return statuses

"""Grid sweeps over verl GRPO runs: one launcher run per grid point, metrics from each run's log.

A sweep lives in one folder (``artifacts/sweeps/<name>/``)::

    sweep.json                 the experiment, grid and fixed overrides (a rerun must match)
    runs/<point>/status.json   finished or failed, why, exit code, seconds, the command
    runs/<point>/output.log    everything the launcher printed (verl's console logger included)
    runs/<point>/wandb/        the run's wandb files (group = sweep name, grid values as config)
    results.csv, results.md    one row per point (written by ``scripts/plot_sweep.py`` too)

Metrics are read back from ``output.log``: verl's console logger prints one
``step:N - key:value - ...`` line per training step, so nothing is re-run to score a point.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlvr.common.files import write_json_atomic, write_text_atomic
from rlvr.common.paths import ROOT
from rlvr.common.processes import RAY_CLI

LAUNCHER = ROOT / "scripts" / "launch_grpo.sh"

# Short grid names for the two axes the TuFT guide sweeps; any full Hydra key works too.
ALIASES = {
    "lr": "actor_rollout_ref.actor.optim.lr",
    "lora_rank": "actor_rollout_ref.model.lora_rank",
    "lora_alpha": "actor_rollout_ref.model.lora_alpha",
    "rollout_n": "actor_rollout_ref.rollout.n",
    "kl_coef": "actor_rollout_ref.actor.kl_loss_coef",
    "entropy_coeff": "actor_rollout_ref.actor.entropy_coeff",
}
REWARD_KEY = "critic/score/mean"  # mean sequence reward of the step's rollouts
# A run whose loss or gradient goes non-finite has collapsed whatever its reward says.
HEALTH_KEYS = (REWARD_KEY, "actor/pg_loss", "actor/grad_norm", "actor/entropy")
STEP_LINE = re.compile(r"step:(\d+) - (.*)")
SAFE_VALUE = re.compile(r"[^A-Za-z0-9.+-]")


class SweepError(Exception):
    """A bad grid or a sweep folder that does not match: scripts print it and exit 2."""


# ---------------------------------------------------------------- grid


@dataclass(frozen=True)
class GridAxis:
    name: str  # as the user wrote it, e.g. "lora_rank"
    key: str  # the Hydra key it sets
    values: tuple[str, ...]


@dataclass(frozen=True)
class GridPoint:
    values: dict[str, str]  # axis name -> value, in grid order
    overrides: tuple[str, ...]  # Hydra overrides that set them

    @property
    def name(self) -> str:
        """Run name from the parameters, e.g. ``lora_rank8_lr1e-05``: safe for paths and Hydra."""
        return "_".join(
            f"{axis.split('.')[-1]}{SAFE_VALUE.sub('', value)}"
            for axis, value in self.values.items()
        )


def parse_grid(specs: Sequence[str]) -> list[GridAxis]:
    """``["lora_rank=8,32", "actor_rollout_ref.actor.optim.lr=1e-6,1e-5"]`` -> grid axes."""
    axes: list[GridAxis] = []
    for spec in specs:
        name, sep, raw = spec.partition("=")
        name = name.strip()
        values = tuple(v.strip() for v in raw.split(",") if v.strip())
        if not sep or not name or not values:
            raise SweepError(f"--grid {spec!r}: expected KEY=V1,V2,... (e.g. lr=1e-5,1e-4)")
        if not re.fullmatch(r"[A-Za-z_][\w.]*", name):
            raise SweepError(f"--grid {spec!r}: {name!r} is not a config key")
        if len(set(values)) != len(values):
            raise SweepError(f"--grid {spec!r}: repeated values")
        key = ALIASES.get(name, name)
        if any(axis.key == key for axis in axes):
            raise SweepError(f"--grid {spec!r}: {key} is already on the grid")
        axes.append(GridAxis(name=name, key=key, values=values))
    if not axes:
        raise SweepError("no --grid given")
    short = [axis.name.split(".")[-1] for axis in axes]
    if len(set(short)) != len(short):
        raise SweepError(f"grid keys must end in different names, got {short}")
    return axes


def grid_points(axes: Sequence[GridAxis]) -> list[GridPoint]:
    """Every combination, the first axis varying slowest; names must tell them apart."""
    points = []
    for combo in itertools.product(*(axis.values for axis in axes)):
        points.append(
            GridPoint(
                values={axis.name: value for axis, value in zip(axes, combo, strict=True)},
                overrides=tuple(
                    f"{axis.key}={value}" for axis, value in zip(axes, combo, strict=True)
                ),
            )
        )
    names = [point.name for point in points]
    clashes = sorted({name for name in names if names.count(name) > 1})
    if clashes:  # e.g. "a/b" and "ab": one run folder for two points would skip one of them
        raise SweepError(f"grid values give the same run name: {', '.join(clashes)}")
    return points


# ---------------------------------------------------------------- running


@dataclass
class SweepSpec:
    name: str
    experiment: str
    grid: list[GridAxis]
    overrides: list[str] = field(default_factory=list)  # fixed for every point
    keep_checkpoints: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "experiment": self.experiment,
            "grid": {axis.name: list(axis.values) for axis in self.grid},
            "grid_keys": {axis.name: axis.key for axis in self.grid},
            "overrides": self.overrides,
            "keep_checkpoints": self.keep_checkpoints,
        }


def point_overrides(spec: SweepSpec, point: GridPoint, run_dir: Path) -> list[str]:
    """What one point passes to the launcher after the experiment name."""
    overrides = [
        *spec.overrides,
        *point.overrides,
        f"trainer.experiment_name={spec.name}__{point.name}",
        f"trainer.default_local_dir={run_dir / 'checkpoints'}",
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
    run_dir: Path,
    launcher: Path = LAUNCHER,
    ray_address: str | None = None,
) -> list[str]:
    """The launcher call for one point; as a Ray job on a cluster when ``ray_address`` is set."""
    command = ["bash", str(launcher), spec.experiment, *point_overrides(spec, point, run_dir)]
    if ray_address is None:
        return command
    env_vars = {"RLVR_LOG_DIR": str(run_dir), "WANDB_RUN_GROUP": spec.name}
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


@dataclass
class RunStatus:
    name: str
    values: dict[str, str]
    state: str  # "finished" or "failed"
    returncode: int | None
    reason: str
    seconds: float
    command: list[str]

    @classmethod
    def load(cls, path: Path) -> RunStatus | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


def failure_reason(returncode: int | None, output: str) -> str:
    """The last error-looking line of a failed run's output, with the exit code."""
    if returncode is None:
        return "timed out"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [
        line
        for line in lines
        if re.search(r"(Error|Exception|error:|FAILED|Traceback|problem)", line)
        and not line.startswith("Traceback")
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


def prepare_sweep_dir(spec: SweepSpec, sweep_dir: Path) -> None:
    """Create the folder or check that it holds this same sweep (so finished points count)."""
    record = sweep_dir / "sweep.json"
    wanted = spec.to_json()
    if record.exists():
        previous = json.loads(record.read_text())
        mismatched = [
            key
            for key in ("experiment", "grid_keys", "overrides", "keep_checkpoints")
            if previous.get(key) != wanted[key]
        ]
        if mismatched:
            raise SweepError(
                f"{sweep_dir} holds a different sweep ({', '.join(mismatched)} differ); "
                "pick another --name or delete the folder"
            )
        # New values on an existing axis just add points; keep every value ever asked for.
        grid = previous["grid"]
        for axis in spec.grid:
            grid[axis.name] = grid[axis.name] + [v for v in axis.values if v not in grid[axis.name]]
        write_json_atomic(record, {**wanted, "grid": grid})
    else:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(record, wanted)


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
    prepare_sweep_dir(spec, sweep_dir)
    points = grid_points(spec.grid)
    statuses = []
    for number, point in enumerate(points, start=1):
        run_dir = sweep_dir / "runs" / point.name
        label = f"[{number}/{len(points)}] {point.name}"
        previous = RunStatus.load(run_dir / "status.json")
        if previous is not None and previous.state == "finished":
            echo(f"{label}: finished earlier, skipped")
            statuses.append(previous)
            continue
        run_dir.mkdir(parents=True, exist_ok=True)
        command = launch_command(spec, point, run_dir, launcher, ray_address)
        run_env = {
            **os.environ,
            **(env or {}),
            "RLVR_LOG_DIR": str(run_dir),  # the launcher's log and wandb files land here
            "WANDB_RUN_GROUP": spec.name,
        }
        echo(f"{label}: running (log: {run_dir / 'output.log'})")
        started = time.monotonic()
        interrupted = False
        try:
            returncode = _run_once(command, run_env, run_dir / "output.log", timeout_s)
        except KeyboardInterrupt:
            interrupted, returncode = True, None
        if returncode is None and ray_address is not None:  # timed out or interrupted
            _stop_ray_job(command, ray_address, run_dir / "output.log")
        seconds = round(time.monotonic() - started, 1)
        output = (run_dir / "output.log").read_text(errors="replace")
        history = parse_console_log(output)
        if interrupted:
            reason = "interrupted"
        elif returncode == 0 and not history:
            returncode, reason = 1, "exit 0 but no training step in the log"
        else:
            reason = "" if returncode == 0 else failure_reason(returncode, output[-20000:])
        status = RunStatus(
            name=point.name,
            values=point.values,
            state="finished" if returncode == 0 else "failed",
            returncode=returncode,
            reason=reason,
            seconds=seconds,
            command=command,
        )
        write_json_atomic(run_dir / "status.json", asdict(status))
        if interrupted:
            raise KeyboardInterrupt
        statuses.append(status)
        if status.state == "finished":
            summary = summarise_history(history)
            echo(
                f"{label}: finished in {seconds:.0f} s, final reward "
                f"{_fmt(summary.final_reward)}{' (collapsed)' if summary.collapsed else ''}"
            )
        else:
            echo(f"{label}: FAILED after {seconds:.0f} s: {reason}")
    return statuses


# ---------------------------------------------------------------- metrics


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_console_log(text: str) -> dict[int, dict[str, float]]:
    """verl's console lines (``step:N - key:value - ...``, Ray prefixes allowed) by step.

    A step logged twice (a resumed run repeats the validation of its start step) keeps the
    later values merged over the earlier ones.
    """
    history: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        match = STEP_LINE.search(line)
        if not match:
            continue
        metrics = history.setdefault(int(match.group(1)), {})
        for item in match.group(2).split(" - "):
            key, sep, value = item.rpartition(":")
            number = _number(value.strip()) if sep else None
            if number is not None and key:
                metrics[key.strip()] = number
    return dict(sorted(history.items()))


def validation_score(metrics: dict[str, float]) -> float | None:
    """The step's headline validation metric: verl's ``val-core/<source>/<var>/mean@N``."""
    scores = [
        value for key, value in metrics.items() if key.startswith("val-core/") and "/mean@" in key
    ]
    return sum(scores) / len(scores) if scores else None


@dataclass
class RunSummary:
    steps: int  # training steps logged
    final_reward: float | None  # mean reward of the last ``last_k`` steps
    peak_reward: float | None  # best moving average (see summarise_history)
    best_val: float | None  # best validation score after training began
    initial_val: float | None  # validation before training (step 0), when run
    collapsed: bool
    collapse_reason: str
    rewards: list[tuple[int, float]]  # (step, reward) for the curves


def summarise_history(
    history: dict[int, dict[str, float]],
    last_k: int = 5,
    collapse_drop: float = 0.5,
    min_peak: float = 0.05,
) -> RunSummary:
    """Final reward, best validation, and whether the run collapsed.

    Collapsed: a loss, gradient norm, entropy or reward went NaN/inf, or the reward's moving
    average (over ``min(last_k, steps // 3)`` steps) ended below ``(1 - collapse_drop)`` of its
    peak (peaks under ``min_peak`` are noise, not a peak to fall from).
    """
    rewards = [(step, m[REWARD_KEY]) for step, m in history.items() if REWARD_KEY in m]
    values = [r for _, r in rewards]
    non_finite = next(
        (
            (step, key, metrics[key])
            for step, metrics in history.items()
            for key in HEALTH_KEYS
            if key in metrics and not math.isfinite(metrics[key])
        ),
        None,
    )
    if non_finite is not None:
        finite = [r for r in values if math.isfinite(r)]
        final, peak, collapsed = None, (max(finite) if finite else None), True
        step, key, value = non_finite
        reason = f"{key} is {value} at step {step}"
    else:
        window = max(1, min(last_k, len(values)))
        final = sum(values[-window:]) / window if values else None
        # Collapse compares short moving averages (a third of the run at most), so a spike
        # and fall inside the last K steps of a short run still shows.
        short = max(1, min(last_k, len(values) // 3))
        moving = [sum(values[i - short : i]) / short for i in range(short, len(values) + 1)]
        peak = max(moving) if moving else None
        end = moving[-1] if moving else None
        collapsed = (
            end is not None
            and peak is not None
            and peak >= min_peak
            and end < (1.0 - collapse_drop) * peak
        )
        reason = f"reward fell from {peak:.3f} to {end:.3f}" if collapsed else ""
    return RunSummary(
        steps=len(rewards),
        final_reward=final,
        peak_reward=peak,
        best_val=_best_val(history),
        initial_val=_initial_val(history),
        collapsed=collapsed,
        collapse_reason=reason,
        rewards=rewards,
    )


def _best_val(history: dict[int, dict[str, float]]) -> float | None:
    scores = [
        score
        for step, metrics in history.items()
        if step > 0 and (score := validation_score(metrics)) is not None
    ]
    return max(scores) if scores else None


def _initial_val(history: dict[int, dict[str, float]]) -> float | None:
    return validation_score(history[0]) if 0 in history else None


# ---------------------------------------------------------------- results


@dataclass
class SweepRow:
    name: str
    values: dict[str, str]
    state: str  # finished, failed, or pending (never run)
    reason: str
    summary: RunSummary | None


def load_sweep(sweep_dir: Path) -> tuple[dict[str, Any], list[SweepRow]]:
    """The sweep record and one row per grid point, metrics read from each run's log."""
    record_path = sweep_dir / "sweep.json"
    if not record_path.is_file():
        raise SweepError(f"{sweep_dir} is not a sweep folder (no sweep.json); run scripts/sweep.py")
    record = json.loads(record_path.read_text())
    axes = [
        GridAxis(name=name, key=record["grid_keys"][name], values=tuple(values))
        for name, values in record["grid"].items()
    ]
    rows = []
    for point in grid_points(axes):
        run_dir = sweep_dir / "runs" / point.name
        status = RunStatus.load(run_dir / "status.json")
        log = run_dir / "output.log"
        history = parse_console_log(log.read_text(errors="replace")) if log.is_file() else {}
        rows.append(
            SweepRow(
                name=point.name,
                values=point.values,
                state=status.state if status else "pending",
                reason=status.reason if status else "",
                summary=summarise_history(history) if history else None,
            )
        )
    return record, rows


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


TABLE_COLUMNS = ("final_reward", "peak_reward", "best_val", "initial_val", "steps", "collapsed")


def _table(rows: Sequence[SweepRow]) -> tuple[list[str], list[list[str]]]:
    axes = list(rows[0].values) if rows else []
    header = ["run", *axes, "state", *TABLE_COLUMNS, "note"]
    body = []
    for row in rows:
        s = row.summary
        body.append(
            [
                row.name,
                *(row.values[a] for a in axes),
                row.state,
                _fmt(s.final_reward) if s else "",
                _fmt(s.peak_reward) if s else "",
                _fmt(s.best_val) if s else "",
                _fmt(s.initial_val) if s else "",
                str(s.steps) if s else "0",
                ("yes" if s.collapsed else "no") if s else "",
                row.reason or (s.collapse_reason if s else ""),
            ]
        )
    return header, body


def results_csv(rows: Sequence[SweepRow]) -> str:
    header, body = _table(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(body)
    return buffer.getvalue()


def results_markdown(record: dict[str, Any], rows: Sequence[SweepRow]) -> str:
    header, body = _table(rows)
    grid = "; ".join(f"{axis} = {', '.join(values)}" for axis, values in record["grid"].items())
    lines = [
        f"# Sweep {record['name']}: {record['experiment']}",
        "",
        f"Grid: {grid}. "
        f"Final reward = mean `{REWARD_KEY}` over the last 5 steps; best val = best "
        "`val-core` score after step 0; collapsed = a non-finite loss or reward, or a reward "
        "moving average that ends under half its peak.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in body]
    finished = [
        (r.summary.final_reward, r.name)
        for r in rows
        if r.summary and r.summary.final_reward is not None
    ]
    if finished:
        reward, name = max(finished, key=lambda pair: pair[0])  # the first best on a tie
        lines += ["", f"Best final reward: **{name}** ({_fmt(reward)})."]
    return "\n".join(lines) + "\n"


def write_tables(sweep_dir: Path, record: dict[str, Any], rows: Sequence[SweepRow]) -> list[Path]:
    paths = [sweep_dir / "results.csv", sweep_dir / "results.md"]
    for path, text in zip(paths, (results_csv(rows), results_markdown(record, rows)), strict=True):
        write_text_atomic(path, text)
    return paths

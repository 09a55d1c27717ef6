"""A sweep's folder (``artifacts/sweeps/<name>/``): its layout, a rerun's check, reading it back.

::

    sweep.json                  the experiment, grid and fixed overrides (a rerun must match)
    runs/<point>/status.json    finished or failed, why, exit code, seconds, the command
    runs/<point>/metrics.jsonl  the run's per-step metrics: verl's ``file`` logger, one JSON line
                                per step (the point sets ``paths.metrics`` to this file)
    runs/<point>/output.log     everything the launcher printed (failure reasons come from it)
    runs/<point>/wandb/         the run's wandb files (group = sweep name, grid values as config)
    results.csv, results.md     one row per point (written by ``scripts/plot_sweep.py`` too)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rlvr.common.files import write_json_atomic
from rlvr.report.metrics_log import StepRecord, read_steps
from rlvr.sweep.grid import (
    GridPoint,
    SweepError,
    SweepSpec,
    axes_from_record,
    grid_points,
    value_key,
)
from rlvr.sweep.history import RunSummary, summarise_history

SWEEP_RECORD = "sweep.json"
STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
OUTPUT_LOG = "output.log"
# What must match for a rerun to count the points already finished.
MATCHING_KEYS = ("experiment", "grid_keys", "overrides", "keep_checkpoints")


def run_dir(sweep_dir: Path, point: GridPoint) -> Path:
    return sweep_dir / "runs" / point.name


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

    def save(self, path: Path) -> None:
        write_json_atomic(path, asdict(self))


def load_records(folder: Path) -> list[StepRecord]:
    """A run folder's per-step records (none yet when it has no metrics file)."""
    try:
        return read_steps(folder / METRICS_FILE)
    except ValueError as exc:
        raise SweepError(str(exc)) from exc


def _read_record(record: Path) -> dict[str, Any]:
    try:
        data = json.loads(record.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("grid"), dict):
            raise ValueError("no grid")
        axes_from_record(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SweepError(
            f"{record}: not a readable sweep record ({exc}); restore it, or pick another --name"
        ) from None
    return data


def prepare_sweep_dir(spec: SweepSpec, sweep_dir: Path) -> SweepSpec:
    """Create the folder or check that it holds this same sweep (so finished points count).

    Returns the spec with each value spelled as the folder first recorded it (``1e-05`` run
    earlier as ``1e-5`` is the same point, not a new run)."""
    record = sweep_dir / SWEEP_RECORD
    wanted = spec.to_json()
    if not record.exists():
        sweep_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(record, wanted)
        return spec
    previous = _read_record(record)
    mismatched = [key for key in MATCHING_KEYS if previous.get(key) != wanted[key]]
    if mismatched:
        raise SweepError(
            f"{sweep_dir} holds a different sweep ({', '.join(mismatched)} differ); "
            "pick another --name or delete the folder"
        )
    # New values on an existing axis just add points; keep every value ever asked for.
    grid = previous["grid"]
    respelled = []
    for axis in spec.grid:
        known = {value_key(v): v for v in grid[axis.name]}
        values = tuple(known.get(value_key(v), v) for v in axis.values)
        grid[axis.name] = grid[axis.name] + [v for v in values if v not in grid[axis.name]]
        respelled.append(replace(axis, values=values))
    write_json_atomic(record, {**wanted, "grid": grid})
    return replace(spec, grid=respelled)


@dataclass
class SweepRow:
    name: str
    values: dict[str, str]
    state: str  # finished, failed, or pending (never run)
    reason: str
    summary: RunSummary | None


def load_sweep(sweep_dir: Path) -> tuple[dict[str, Any], list[SweepRow]]:
    """The sweep record and one row per grid point, metrics read from each run's records."""
    record_path = sweep_dir / SWEEP_RECORD
    if not record_path.is_file():
        raise SweepError(f"{sweep_dir} is not a sweep folder (no sweep.json); run scripts/sweep.py")
    record = _read_record(record_path)
    rows = []
    for point in grid_points(axes_from_record(record)):
        folder = run_dir(sweep_dir, point)
        status = RunStatus.load(folder / STATUS_FILE)
        records = load_records(folder)
        rows.append(
            SweepRow(
                name=point.name,
                values=point.values,
                state=status.state if status else "pending",
                reason=status.reason if status else "",
                summary=summarise_history(records) if records else None,
            )
        )
    return record, rows

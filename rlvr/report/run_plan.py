"""The run's planned length, and the status line the report opens with.

The trainer writes ``run_plan.json`` into the run folder (``os.path.dirname(paths.metrics)``) once
it knows how many steps it will train (``write_run_plan``); the report compares that with the
last step ``metrics.jsonl`` logged and with verl's checkpoint tracker
(``latest_checkpointed_iteration.txt`` in ``trainer.default_local_dir``, written by
``RayPPOTrainer._save_checkpoint``), so that a run killed early, or one whose metrics lost lines,
is never reported as a finished one. The status is the run's state, not its health: it is no
alarm. The plan may also name the run's model, task and answer protocol (``model``, ``task``,
``answer_protocol``), which the report matches against published results (``rlvr.report.bands``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlvr.common.checkpoints import TRACKER_FILE, UnreadableTracker, tracked_step
from rlvr.common.files import write_text_atomic
from rlvr.report.metrics_log import step_ranges

PLAN_FILE = "run_plan.json"


class RunPlan(BaseModel):
    """What ``run_plan.json`` holds; strict (``"5"`` or ``5.0`` is no step count)."""

    model_config = ConfigDict(strict=True, frozen=True)

    total_training_steps: int = Field(ge=1)
    experiment: str | None = None
    #: ``trainer.default_local_dir`` (absolute) where it is not the run folder (a sweep's point
    #: keeps its checkpoints in ``<point>/checkpoints``): where the tracker is read.
    checkpoints: str | None = None
    #: What the report matches against published results (``rlvr.report.bands``): the model the
    #: run starts from (``actor_rollout_ref.model.path``), the task, and the protocol id (in
    #: rlvr/report/reference_bands.yaml) of the reward that reads the answers. Optional: plans
    #: written before them, or by a trainer that does not know them, stay valid.
    model: str | None = None
    task: str | None = None
    answer_protocol: str | None = None
    #: What the report sets the run's throughput against (``rlvr.report.throughput``): the GPU
    #: (the kind Ray detected, else the overlay's ``hardware_facts.gpu``) and the settings that
    #: most often explain a slow run (``rlvr.report.bands.RunSettings``' keys).
    gpu: str | None = None
    settings: dict[str, bool | int | float] | None = None


#: Left out of the file when None, so that a plan without them is written as it always was.
OPTIONAL_FIELDS = ("model", "task", "answer_protocol", "gpu", "settings")


def write_run_plan(
    folder: str | os.PathLike[str],
    total_training_steps: int,
    experiment: str | None,
    checkpoints: str | os.PathLike[str] | None = None,
    *,
    model: str | None = None,
    task: str | None = None,
    answer_protocol: str | None = None,
    gpu: str | None = None,
    settings: dict[str, bool | int | float] | None = None,
) -> Path:
    """Write ``folder/run_plan.json`` whole (staged and renamed); returns its path. Raises
    ValueError on a step count that is not a positive integer."""
    where = os.path.abspath(checkpoints) if checkpoints is not None else None
    try:
        plan = RunPlan(
            total_training_steps=total_training_steps,
            experiment=experiment,
            checkpoints=where,
            model=model,
            task=task,
            answer_protocol=answer_protocol,
            gpu=gpu,
            settings=settings,
        )
    except ValidationError as exc:
        raise ValueError(f"run plan: {validation_problem(exc)}") from None
    path = Path(folder) / PLAN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)  # a new run's folder: nothing logged yet
    unset = {name for name in OPTIONAL_FIELDS if getattr(plan, name) is None}
    write_text_atomic(path, plan.model_dump_json(indent=2, exclude=unset) + "\n")
    return path


def read_run_plan(folder: str | os.PathLike[str]) -> tuple[RunPlan | None, str | None]:
    """The plan in ``folder``: (None, None) when there is none, (None, a note saying why) when it
    cannot be read; never raises."""
    path = Path(folder) / PLAN_FILE
    try:
        return RunPlan.model_validate_json(path.read_bytes()), None
    except FileNotFoundError:
        return None, None
    except ValidationError as exc:
        return (
            None,
            f"{PLAN_FILE}: not read ({validation_problem(exc)}); the run's length is unknown",
        )
    except OSError as exc:
        return None, f"{PLAN_FILE}: not read ({type(exc).__name__}); the run's length is unknown"


def read_checkpointed_step(folder: Path) -> tuple[int | None, str | None]:
    """The step verl's tracker in ``folder`` names: (None, None) without one, (None, a note) when
    it holds no step number (a crash between verl's open and write leaves it empty)."""
    try:
        return tracked_step(folder), None
    except UnreadableTracker as exc:
        return None, f"{exc}; the checkpoints were not compared"


def run_status(
    folder: Path, training_steps: Sequence[int], plan: RunPlan | None, plan_note: str | None
) -> tuple[str, list[str]]:
    """The status line for a run whose ``metrics.jsonl`` logged ``training_steps`` (step 0, the
    validation before training, left out) against ``plan`` (``read_run_plan``'s, read once per
    report), and notes on the files that could not be read."""
    where = Path(plan.checkpoints) if plan and plan.checkpoints else folder
    saved, tracker_note = read_checkpointed_step(where)
    notes = [note for note in (plan_note, tracker_note) if note]
    last = max(training_steps, default=0)
    planned = plan.total_training_steps if plan else None
    of_planned = f" of {planned} planned" if planned else ""
    if saved is not None and saved > last:
        return (
            f"metrics lines missing for the steps after {last}: last step logged {last}"
            f"{of_planned}, but the checkpoint tracker ({TRACKER_FILE}) says step {saved} was "
            "saved (lines lost, or not written yet); this report ends at step "
            f"{last}",
            notes,
        )
    missing = sorted(set(range(1, last + 1)) - set(training_steps))
    gaps = f"; no metrics line for step(s) {step_ranges(missing)}" if missing else ""
    if planned is None:
        why = "run_plan.json unreadable, see notes" if plan_note else f"no {PLAN_FILE}"
        return f"length unknown ({why}): last step logged {last}{gaps}", notes
    if last < planned:
        status = f"stopped early (or still running): last step logged {last} of {planned} planned"
        return status + gaps, notes
    if missing:
        return f"incomplete: {last - len(missing)} of {last} steps logged{gaps}", notes
    if last > planned:
        return f"complete: last step logged {last}, past the {planned} planned", notes
    return f"complete: {planned} of {planned} steps logged", notes


def validation_problem(exc: ValidationError) -> str:
    """The first error of ``exc`` on one line: 'key.path: message'."""
    error = exc.errors()[0]
    key = ".".join(str(part) for part in error["loc"])
    return f"{key}: {error['msg']}" if key else error["msg"]

"""A training run's per-step metrics, read from the JSON lines verl's ``file`` logger writes.

``configs/grpo.yaml`` logs to ``file`` with the path ``paths.metrics``
(``<trainer.default_local_dir>/metrics.jsonl`` unless overridden; the sweep puts it in each
point's folder). Each logged step is one line, as ``verl.utils.tracking.FileLogger`` writes it
(fixed by ``rlvr/train/verl_patches.py`` so that it can write at all)::

    {"step": 1, "data": {"critic/score/mean": 0.25, "actor/pg_loss": -0.1, ...}}

Python's ``json`` writes a non-finite value as ``NaN``/``Infinity`` and reads it back as one.
Step 0 holds the validation before training; a step that validates also holds ``val-core/...``.
This module is the one reader of that file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StepRecord:
    step: int
    metrics: dict[str, float]  # the step's numeric metrics (integers as floats, NaN/inf kept)


def read_steps(path: Path) -> list[StepRecord]:
    """The steps logged to ``path``, in step order; none when the file does not exist (yet)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return parse_steps(text, str(path))


def parse_steps(text: str, source: str = "metrics") -> list[StepRecord]:
    """Step records from JSON-lines text (see the module docstring).

    A step logged twice (a resumed run validates its start step again) keeps the later values
    merged over the earlier ones. A last line without its newline is a write cut short (a run
    killed, or one still writing) and is left out; any other line that is not a step record
    raises ValueError naming it. Values that are not numbers (text, lists) are left out.
    """
    lines = text.split("\n")
    steps: dict[int, dict[str, float]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            step, metrics = _parse_record(json.loads(line))
        except ValueError as exc:
            if number == len(lines):  # not newline-terminated: still being written
                continue
            raise ValueError(f"{source}:{number}: not a step record ({exc}): {line[:200]}") from exc
        steps.setdefault(step, {}).update(metrics)
    return [StepRecord(step, metrics) for step, metrics in sorted(steps.items())]


def drop_torn_tail(path: Path) -> int:
    """Cut a last line without its newline (a write a killed run left half done) off ``path``,
    so that appending to the file continues it on a line of its own; returns the bytes cut."""
    try:
        with path.open("rb+") as handle:
            data = handle.read()
            if not data or data.endswith(b"\n"):
                return 0
            keep = data.rfind(b"\n") + 1  # 0 when the torn line is the only one
            handle.truncate(keep)
            return len(data) - keep
    except FileNotFoundError:
        return 0


def _parse_record(record: Any) -> tuple[int, dict[str, float]]:
    if not isinstance(record, dict) or not isinstance(record.get("data"), dict):
        raise ValueError('expected {"step": N, "data": {...}}')
    step = record.get("step")
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if not isinstance(step, int) or isinstance(step, bool):
        raise ValueError(f"step {step!r} is not an integer")
    metrics = {
        str(key): float(value)
        for key, value in record["data"].items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
    return step, metrics

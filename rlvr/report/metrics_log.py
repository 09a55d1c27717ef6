"""A training run's per-step metrics, read from the JSON lines verl's ``file`` logger writes.

``configs/grpo.yaml`` logs to ``file`` with the path ``paths.metrics``
(``<trainer.default_local_dir>/metrics.jsonl`` unless overridden; the sweep puts it in each
point's folder). Each logged step is one line, as ``verl.utils.tracking.FileLogger`` writes it
(fixed by ``rlvr/report/loggers.py`` so that it can write at all; a verl run and a Tinker run
both write through it)::

    {"step": 1, "data": {"critic/score/mean": 0.25, "actor/pg_loss": -0.1, ...}}

Python's ``json`` writes a non-finite value as ``NaN``/``Infinity`` and reads it back as one.
Step 0 holds the validation before training; a step that validates also holds ``val-core/...``.
This module is the one reader of that file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StepRecord:
    step: int
    metrics: dict[str, float]  # the step's numeric metrics (integers as floats, NaN/inf kept)


@dataclass(frozen=True)
class MetricsLog:
    """The steps a metrics file logged, and notes on what was left out reading it (a torn last
    line, values that are not numbers), one line each, for the report."""

    steps: list[StepRecord]
    notes: list[str]


def read_log(path: Path) -> MetricsLog:
    """The steps logged to ``path`` and the notes; none when the file does not exist (yet)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return MetricsLog([], [])
    return parse_log(text, str(path))


def read_steps(path: Path) -> list[StepRecord]:
    """``read_log``'s steps, for callers that need no notes."""
    return read_log(path).steps


def parse_steps(text: str, source: str = "metrics") -> list[StepRecord]:
    """``parse_log``'s steps, for callers that need no notes."""
    return parse_log(text, source).steps


def parse_log(text: str, source: str = "metrics") -> MetricsLog:
    """Step records from JSON-lines text (see the module docstring).

    A step logged twice (a resumed run validates its start step again) keeps the later values
    merged over the earlier ones. A last line without its newline is a write cut short (a run
    killed, or one still writing): it is left out, with a note. Any other line that is not a
    step record raises ValueError naming it. Values that are not numbers (text, lists, booleans)
    are left out, with one note counting them.
    """
    lines = text.split("\n")
    steps: dict[int, dict[str, float]] = {}
    notes: list[str] = []
    dropped: list[tuple[int, str]] = []  # (step, key) of the values that are not numbers
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            step, metrics, others = _parse_record(json.loads(line))
        except ValueError as exc:
            if number == len(lines):  # not newline-terminated: still being written
                notes.append(_torn_note(source, number, line))
                continue
            raise ValueError(f"{source}:{number}: not a step record ({exc}): {line[:200]}") from exc
        steps.setdefault(step, {}).update(metrics)
        dropped += [(step, key) for key in others]
    if dropped:
        step, key = dropped[0]
        notes.append(
            f"{source}: {len(dropped)} value(s) that are not numbers left out (the first: "
            f"{key!r} at step {step}); the report reads numbers only"
        )
    return MetricsLog([StepRecord(step, metrics) for step, metrics in sorted(steps.items())], notes)


def _torn_note(source: str, number: int, line: str) -> str:
    size = len(line.encode("utf-8"))
    return (
        f"{source}:{number}: last line skipped ({size} bytes without a newline): cut short: "
        "a killed run, or one still writing"
    )


def step_ranges(steps: Sequence[int]) -> str:
    """``1, 2, 3, 7`` as ``1-3, 7``."""
    parts: list[str] = []
    ordered = sorted(set(steps))
    start = previous = None
    for step in [*ordered, None]:
        if step is not None and previous is not None and step == previous + 1:
            previous = step
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = step
    return ", ".join(parts)


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


def _parse_record(record: Any) -> tuple[int, dict[str, float], list[str]]:
    """The step, its numeric metrics, and the keys of the values that are not numbers."""
    if not isinstance(record, dict) or not isinstance(record.get("data"), dict):
        raise ValueError('expected {"step": N, "data": {...}}')
    step = record.get("step")
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if not isinstance(step, int) or isinstance(step, bool):
        raise ValueError(f"step {step!r} is not an integer")
    metrics: dict[str, float] = {}
    others: list[str] = []
    for key, value in record["data"].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            metrics[str(key)] = float(value)
        else:
            others.append(str(key))
    return step, metrics, others

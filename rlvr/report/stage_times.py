"""Where a quickstart's time goes: the lines scripts/stages.sh appends to ``stage_times.jsonl``
(``{"stage": LABEL, "seconds": S, "status": EXIT}``, one per stage that ended), read and shown
as a table with each stage's share of the total."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

STAGE_TIMES_FILE = "stage_times.jsonl"
OUTSIDE = "(outside the stages)"  # uv starts, settings reads, greps between the stages


@dataclass(frozen=True)
class StageTime:
    stage: str
    seconds: float
    status: int = 0


def read_stage_times(path: Path) -> list[StageTime]:
    """The file's stages in order; none if it does not exist. A bad line: ValueError naming it."""
    if not path.is_file():
        return []
    times = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            times.append(
                StageTime(str(entry["stage"]), float(entry["seconds"]), int(entry.get("status", 0)))
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} line {number}: not a stage time ({exc})") from exc
    return times


def with_outside(times: list[StageTime], total: float) -> tuple[list[StageTime], float]:
    """The stages, plus the time outside them when ``total`` (the whole run's wall seconds)
    exceeds their sum; and the total the shares are of."""
    inside = sum(t.seconds for t in times)
    if total > inside:
        return [*times, StageTime(OUTSIDE, total - inside)], total
    return times, inside


def stage_rows(times: list[StageTime], total: float) -> list[dict[str, object]]:
    """JSON rows: stage, seconds, share of ``total`` (with_outside's), exit status."""
    return [
        {
            "stage": t.stage,
            "seconds": round(t.seconds, 3),
            "share": round(t.seconds / total, 4) if total > 0 else None,
            "status": t.status,
        }
        for t in times
    ]


def stage_table(times: list[StageTime], total: float) -> list[str]:
    """A Markdown table of ``stage_rows``; a failed stage says so."""
    lines = ["| stage | seconds | share |", "|---|---|---|"]
    for row in stage_rows(times, total):
        share = row["share"]
        failed = f" (exit {row['status']})" if row["status"] else ""
        shown = f"{share:.1%}" if isinstance(share, float) else "-"
        lines.append(f"| {row['stage']}{failed} | {row['seconds']:.1f} | {shown} |")
    return [*lines, f"| total | {total:.1f} | 100.0% |"]

"""report.md: what the run logged, each alarm (fired first, with its steps and what to try), how
the run stands against published results (``rlvr.report.bands``), a table of the key metrics and
the figures."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rlvr.report import alarms as checks
from rlvr.report.alarms import Alarm
from rlvr.report.alarms.mismatch_rules import K3_KL, LOG_PPL_ABS_DIFF
from rlvr.report.metrics_log import step_ranges
from rlvr.report.records import RunRecords
from rlvr.report.references import reference_lines

#: The table's rows: the metrics docs/TRAINING.md "Reading the metrics" explains.
TABLE_KEYS = (
    checks.SCORE,
    checks.ENTROPY,
    checks.LENGTH,
    checks.LENGTH_CLIP,
    checks.PG_CLIPFRAC,
    "actor/kl_loss",
    "actor/ppo_kl",
    checks.GRAD_NORM,
    LOG_PPL_ABS_DIFF,  # rollout/training mismatch (verl's rollout_corr metrics)
    K3_KL,
)
FIGURE_ORDER = ("reward", "entropy", "length", "clip", "kl", "grad_norm", "groups")


def _cell(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def render(
    records: RunRecords,
    alarms: Sequence[Alarm],
    figures: Mapping[str, Path],
    out_dir: Path,
    preamble: Sequence[str] = (),
) -> str:
    """report.md; ``preamble`` (Markdown lines) goes after the header, before the alarms."""
    name = records.run_dir.resolve().name
    fired = [alarm for alarm in alarms if alarm.fired]
    lines = [f"# Run report: {name}", ""]
    if records.status:
        lines += [f"**Status: {records.status}.**", ""]
    lines += [*_header(records), ""]
    lines += preamble
    lines += [f"## Alarms: {len(fired)} of {len(alarms)} fired", ""]
    order = {checks.FIRED: 0, checks.OK: 1, checks.NO_DATA: 2}
    for alarm in sorted(alarms, key=lambda alarm: order.get(alarm.status, 3)):
        lines += _alarm_lines(alarm)
    lines += ["", "## Reference (published results; no alarm)", ""]
    lines += [f"- {line}" for line in reference_lines(records)]
    lines += ["", "## Key metrics (training steps)", ""]
    lines += _table(records)
    if figures:
        lines += ["", "## Figures", ""]
        for key in sorted(
            figures, key=lambda k: FIGURE_ORDER.index(k) if k in FIGURE_ORDER else 99
        ):
            link = _relative(figures[key], out_dir)
            lines += [f"![{key}]({link})", ""]
    if records.notes:
        lines += ["", "## Notes", "", *(f"- {note}" for note in records.notes)]
    lines += ["", "Thresholds and advice: docs/REPORT.md.", ""]
    return "\n".join(lines)


def _header(records: RunRecords) -> list[str]:
    training = [r.step for r in records.steps if r.step > 0]
    val_key = records.val_key()
    validations = [step for step, _ in records.finite(val_key)] if val_key else []
    dumps = sorted(records.rollouts)
    responses = sum(len(records.rollouts[step]) for step in dumps)
    task = records.task.name if records.task else "unknown (the alarm on reward hacking needs it)"
    return [
        f"- run folder: `{records.run_dir}`",
        f"- last step logged: {records.last_step} ({len(training)} training steps logged)",
        f"- validations: steps {step_ranges(validations) or 'none'}"
        + (f" (`{val_key}`)" if val_key else ""),
        f"- task: {task}",
        f"- rollout dumps: steps {step_ranges(dumps)} ({responses} responses)"
        if dumps
        else "- rollout dumps: none (set trainer.rollout_data_dir)",
        f"- written: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
    ]


def _steps(steps: Sequence[int]) -> str:
    return f"step{'s' if len(steps) > 1 else ''} {step_ranges(steps)}"


def _alarm_lines(alarm: Alarm) -> list[str]:
    if not alarm.fired:
        return [f"- {alarm.status}: {alarm.title}. {alarm.detail}."]
    lines = [
        f"- **FIRED: {alarm.title}** at {_steps(alarm.steps)}. {alarm.detail}. "
        f"**Try:** {alarm.advice}."
    ]
    lines += [f"  - e.g. `{example.replace('`', chr(39))}`" for example in alarm.examples]
    return lines


def _table(records: RunRecords) -> list[str]:
    rows = ["| metric | first | last | min | max |", "|---|---|---|---|---|"]
    for key in (*TABLE_KEYS, records.val_key()):
        points = records.finite(key) if key else []
        if not points:
            continue
        values = [value for _, value in points]
        first, last = points[0], points[-1]
        rows.append(
            f"| `{key}` | {_cell(first[1])} (step {first[0]}) | {_cell(last[1])} (step {last[0]}) "
            f"| {_cell(min(values))} | {_cell(max(values))} |"
        )
    return rows if len(rows) > 2 else ["(no training metrics logged yet)"]


def _relative(path: Path, base: Path) -> str:
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()

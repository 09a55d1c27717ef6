"""A training run's report: health alarms, curves and report.md, from the run folder.

``build(run_dir)`` is the one entry point (scripts/report.py calls it, and so does the training
entry point, ``rlvr/train/main.py``, when training returns). The parts: ``records`` (metrics.jsonl
and verl's rollout dumps), ``alarms`` (pure checks with named thresholds), ``figures`` (PNGs) and
``markdown`` (report.md) and ``run_plan`` (the planned length the trainer writes, and the status
line report.md opens with). docs/REPORT.md explains each alarm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlvr.common.files import writable_folder_problem, write_text_atomic
from rlvr.report.alarms import Alarm, run_checks
from rlvr.report.figures import draw_figures
from rlvr.report.markdown import render
from rlvr.report.records import NotYetError, ReportError, RolloutCache, RunRecords, load_run
from rlvr.tasks.spec import TaskSpec

REPORT_FILE = "report.md"


@dataclass(frozen=True)
class Report:
    """What ``build`` wrote: report.md, the figures by name (reward, entropy, length, clip, kl,
    grad_norm, groups: those with data), and every alarm's verdict."""

    path: Path
    figures: dict[str, Path]
    alarms: list[Alarm]
    records: RunRecords

    @property
    def fired(self) -> list[Alarm]:
        return [alarm for alarm in self.alarms if alarm.fired]


def build(
    run_dir: Path | str,
    out_dir: Path | str | None = None,
    task: TaskSpec | None = None,
    cache: RolloutCache | None = None,
    preamble: Sequence[str] = (),
) -> Report:
    """Read the run in ``run_dir``, write report.md and the PNGs to ``out_dir`` (default: the run
    folder), each file atomically. Raises ReportError (one line) on input it cannot read;
    ``task`` overrides the task read from the run; ``cache`` keeps parsed rollout dumps between
    calls (``--follow``); ``preamble``: Markdown lines placed after the header (the quickstart's
    held-out change, rlvr/evaluation/statistics.py's ``held_out_section``)."""
    run = Path(run_dir)
    records = load_run(run, task, cache)
    alarms = run_checks(records)
    out = Path(out_dir) if out_dir is not None else run
    problem = writable_folder_problem(out, "--out" if out_dir is not None else "RUN")
    if problem is not None:
        raise ReportError(problem)
    figures = draw_figures(records, [a for a in alarms if a.fired], out, run.resolve().name)
    path = out / REPORT_FILE
    write_text_atomic(path, render(records, alarms, figures, out, preamble))
    return Report(path, figures, alarms, records)


__all__ = ["Alarm", "NotYetError", "Report", "ReportError", "RunRecords", "build"]

"""A training run's report: health alarms, curves and report.md, written into the run folder.

Usage: uv run scripts/report.py RUN [--out DIR] [--task NAME] [--follow] [--interval S]

RUN is the run's trainer.default_local_dir (artifacts/checkpoints/<experiment>), holding
metrics.jsonl and, when trainer.rollout_data_dir is set (configs/grpo.yaml), rollouts/<step>.jsonl.
Writes RUN/report.md (or DIR/report.md) and one PNG per signal: reward, entropy, length, clip,
kl, grad_norm, groups. Prints the run's status (complete, stopped early, metrics lines missing,
length unknown: RUN/run_plan.json against the steps logged), a "note: ..." line per thing skipped
while reading, a "reference: ..." line per published result the run matches (on track, behind,
ahead, or why no verdict; docs/REFERENCE_BANDS.md), and each fired alarm on one line. Alarms,
thresholds and advice: docs/REPORT.md. With --follow, re-reads the run and rewrites the report
every S seconds (it waits for a run that has logged nothing yet) until Ctrl-C, which exits 0
leaving the last report whole.
Bad input (no such folder, no metrics.jsonl, an empty or unreadable one): one line, exit code 2.
"""

from __future__ import annotations

import argparse
import sys
import time

from rlvr.common.cli import docstring_parser
from rlvr.common.disk_full import report_disk_full
from rlvr.common.signals import sigterm_as_interrupt
from rlvr.report import NotYetError, Report, ReportError, build
from rlvr.report.records import RolloutCache
from rlvr.report.references import reference_lines
from rlvr.tasks.spec import TaskError, TaskSpec


def build_parser() -> argparse.ArgumentParser:
    parser = docstring_parser(__doc__)
    add = parser.add_argument
    add("run", metavar="RUN", help="the run folder (trainer.default_local_dir)")
    add("--out", help="folder for report.md and the PNGs (default: RUN)")
    add("--task", help="the task, when the run does not name it (no validation logged yet)")
    add("--follow", action="store_true", help="rewrite the report every --interval s")
    add("--interval", type=float, default=60.0, help="seconds between rewrites (default 60)")
    return parser


def _task(parser: argparse.ArgumentParser, name: str | None) -> TaskSpec | None:
    if name is None:
        return None
    from rlvr import tasks

    try:
        return tasks.get(name)
    except TaskError as exc:
        parser.error(f"--task: {exc}")


def _summary(report: Report) -> str:
    fired = report.fired
    lines = [f"report: {report.path} ({len(report.figures)} figures, {len(fired)} alarms fired)"]
    if report.records.status:
        lines.append(f"status: {report.records.status}")
    lines += [f"note: {note}" for note in report.records.notes]
    lines += [f"reference: {line}" for line in reference_lines(report.records)]
    lines += [f"  ALARM {alarm.title}: steps {list(alarm.steps)}" for alarm in fired]
    return "\n".join(lines)


def follow(args: argparse.Namespace, task: TaskSpec | None) -> int:
    cache: RolloutCache = {}
    waiting = False
    last: Report | None = None
    try:
        with sigterm_as_interrupt():
            while True:
                try:
                    last = build(args.run, args.out, task, cache)
                    print(_summary(last), flush=True)
                    waiting = False
                except NotYetError as exc:  # the run has not logged a step yet
                    if not waiting:
                        print(f"waiting: {exc}", file=sys.stderr, flush=True)
                    waiting = True
                time.sleep(args.interval)
    except KeyboardInterrupt:
        where = last.path if last is not None else "none written"
        print(f"stopped; last report: {where}", file=sys.stderr)
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.interval > 0:
        parser.error(f"--interval {args.interval:g}: must be more than 0 seconds")
    task = _task(parser, args.task)
    try:
        if args.follow:
            return follow(args, task)
        print(_summary(build(args.run, args.out, task)))
    except ReportError as exc:
        print(f"error: report: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a full disk is one line (exit 1); anything else is a bug
        return report_disk_full(exc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

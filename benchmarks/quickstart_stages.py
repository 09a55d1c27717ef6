"""Where the quickstart's time goes, old commit vs new: stage times and eval tokens/s side by side.

Usage: uv run python benchmarks/quickstart_stages.py OLD_OUT NEW_OUT

OLD_OUT and NEW_OUT are two quickstart --out folders (say, `bash scripts/quickstart.sh --out
/tmp/old` at the old commit and `--out /tmp/new` at the new one, on the same machine). Stage times
come from each folder's stage_times.jsonl (scripts/stages.sh writes it), the total from
quickstart_report.json's "seconds" (the time up to the report; else the stages' sum); the eval
runs' tokens/s (generating and grading, model loading excluded) from each
eval_*/summary.json's "timing". A folder from before these were recorded shows n/a where it
lacks them. Each row's ratio is new / old: below 1 the new commit spends less time (stages) and
above 1 it generates faster (tokens/s).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlvr.common.cli import docstring_parser
from rlvr.evaluation import EvalError
from rlvr.evaluation.records import load_summary
from rlvr.report.stage_times import STAGE_TIMES_FILE, read_stage_times

Column = dict[str, float]  # row name -> value in one folder


def stage_seconds(out: Path) -> Column:
    """Stage label -> wall seconds (a label run twice: summed), and "total"."""
    seconds: Column = {}
    for stage in read_stage_times(out / STAGE_TIMES_FILE):
        seconds[stage.stage] = seconds.get(stage.stage, 0.0) + stage.seconds
    report = out / "quickstart_report.json"
    total = json.loads(report.read_text()).get("seconds") if report.is_file() else None
    if isinstance(total, int | float) and total > 0:
        seconds["total"] = float(total)
    elif seconds:
        seconds["total"] = sum(seconds.values())
    return seconds


def tokens_per_second(out: Path) -> Column:
    """Eval run folder name -> generated tokens per second, where its summary recorded them."""
    rates: Column = {}
    for summary in sorted(out.glob("eval_*/summary.json")):
        try:
            rate = load_summary(summary).tokens_per_second
        except EvalError:
            continue  # not an eval run's summary: nothing to compare
        if rate is not None:
            rates[summary.parent.name] = rate
    return rates


def side_by_side(title: str, unit: str, old: Column, new: Column) -> list[str]:
    """A Markdown table: each row in either folder (old's order first), old, new, new / old."""
    rows = [*old, *(name for name in new if name not in old)]
    lines = [f"| {title} | old {unit} | new {unit} | new / old |", "|---|---|---|---|"]
    for name in rows:
        before, after = old.get(name), new.get(name)
        ratio = f"{after / before:.2f}" if before and after is not None else "n/a"
        lines.append(f"| {name} | {_cell(before)} | {_cell(after)} | {ratio} |")
    return lines


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = docstring_parser(__doc__)
    add = parser.add_argument
    add("old_out", metavar="OLD_OUT", type=Path, help="the old commit's quickstart --out folder")
    add("new_out", metavar="NEW_OUT", type=Path, help="the new commit's quickstart --out folder")
    args = parser.parse_args(argv)
    columns = []
    for out in (args.old_out, args.new_out):
        if not out.is_dir():
            print(f"error: {out}: no such folder (a quickstart --out folder)", file=sys.stderr)
            return 2
        try:
            columns.append((stage_seconds(out), tokens_per_second(out)))
        except (ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if not any(columns[-1]):
            print(f"error: {out}: no stage times, report or timed eval run", file=sys.stderr)
            return 2
    (old_stages, old_rates), (new_stages, new_rates) = columns
    print(f"old: {args.old_out}\nnew: {args.new_out}\n")
    print("\n".join(side_by_side("stage", "s", old_stages, new_stages)))
    print()
    print("\n".join(side_by_side("eval run", "tokens/s", old_rates, new_rates)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

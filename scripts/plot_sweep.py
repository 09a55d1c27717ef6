"""Figures and tables for a sweep folder: final reward vs LR (a line per rank), reward curves.

Usage: uv run scripts/plot_sweep.py artifacts/sweeps/NAME [--x lr]

Reads each run's per-step metrics (runs/<point>/metrics.jsonl, verl's JSON lines; nothing is
re-run) and writes, under the sweep folder:
final_reward_vs_<x>.png, reward_curves.png, results.csv and results.md. Works on a sweep
still in progress: unfinished points show as pending, failed ones as crosses on the x axis.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlvr.common.cli import docstring_parser
from rlvr.sweep.folder import load_sweep
from rlvr.sweep.grid import SweepError
from rlvr.sweep.plots import write_report


def main(argv: list[str] | None = None) -> int:
    parser = docstring_parser(__doc__)
    parser.add_argument("sweep_dir", help="a folder written by scripts/sweep.py")
    parser.add_argument(
        "--x", help="grid axis on the x axis of the main figure (default: lr if swept)"
    )
    args = parser.parse_args(argv)
    try:
        record, rows = load_sweep(Path(args.sweep_dir))
        written = write_report(Path(args.sweep_dir), record, rows, x_axis=args.x)
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print((Path(args.sweep_dir) / "results.md").read_text())
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

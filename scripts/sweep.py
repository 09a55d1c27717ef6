"""Grid sweep of verl GRPO runs: one launcher run per point, named from its parameters.

Usage: uv run scripts/sweep.py --experiment EXPERIMENT --grid KEY=V1,V2 [--grid ...] [overrides...]

Example (the TuFT guide's LoRA grid on Countdown, 8xA100):
  uv run scripts/sweep.py --experiment countdown_qwen3_4b_lora --name lora_grid \\
      --grid lora_rank=8,32,128 --grid lr=1e-6,1e-5,5e-5,1e-4,5e-4 trainer.total_training_steps=100

Points run one after another (each through scripts/train.sh, or as a Ray job with
--ray_address). Points already finished are skipped, so rerunning resumes a sweep; a failed
point is recorded (runs/<point>/status.json) and the sweep goes on. At the end the results
table and figures are written as scripts/plot_sweep.py does. Short grid names: lr, lora_rank,
lora_alpha, rollout_n, kl_coef, entropy_coeff; any full Hydra key works too.
"""

from __future__ import annotations

import argparse
import math
import re
import signal
import sys
from pathlib import Path

from rlvr.common.cli import docstring_parser
from rlvr.common.disk_full import report_disk_full
from rlvr.common.signals import interrupt_signal, sigterm_as_interrupt
from rlvr.sweep.folder import load_sweep
from rlvr.sweep.grid import SweepError, SweepSpec, parse_grid
from rlvr.sweep.plots import write_report
from rlvr.sweep.runner import ROOT, checked_points, run_sweep


def _parser() -> argparse.ArgumentParser:
    parser = docstring_parser(__doc__)
    parser.add_argument("--experiment", required=True, help="experiment in configs/ to sweep")
    parser.add_argument(
        "--grid",
        action="append",
        required=True,
        metavar="KEY=V1,V2",
        help="one grid axis; repeat for more (the first varies slowest)",
    )
    parser.add_argument("--name", help="sweep name (default: EXPERIMENT_sweep)")
    parser.add_argument(
        "--out", default=str(ROOT / "artifacts/sweeps"), help="parent folder (artifacts/sweeps)"
    )
    parser.add_argument(
        "--ray_address",
        help="submit each point as a Ray job to this cluster (e.g. http://HEAD:8265) "
        "instead of launching it on this machine",
    )
    parser.add_argument(
        "--timeout_h", type=float, default=24.0, help="hard limit per point, hours (24)"
    )
    parser.add_argument(
        "--keep_checkpoints",
        action="store_true",
        help="keep each point's checkpoints (default: trainer.save_freq=-1, none saved)",
    )
    parser.add_argument(
        "--dry_run",
        action="store_true",
        help="compose and check every point's config (verl's own checks), print, run nothing",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides shared by every point")
    return parser


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _check_args(args: argparse.Namespace) -> None:
    """Flags that would misplace or never bound the runs, refused before anything runs."""
    if args.name is not None and not NAME.fullmatch(args.name):
        raise SweepError(
            f"--name {args.name!r}: must be a plain folder name (letters, digits, _ . -), not a "
            "path; use --out for the parent folder"
        )
    if not math.isfinite(args.timeout_h) or args.timeout_h <= 0:
        raise SweepError(f"--timeout_h {args.timeout_h}: must be a number of hours > 0")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SweepError(f"--out {out}: exists and is not a folder; pick a folder")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        _check_args(args)
        spec = SweepSpec(
            name=args.name or f"{args.experiment}_sweep",
            experiment=args.experiment,
            grid=parse_grid(args.grid),
            overrides=list(args.overrides),
            keep_checkpoints=args.keep_checkpoints,
        )
        points = checked_points(spec)  # a typo or a bad batch size fails here, not after N runs
        sweep_dir = Path(args.out) / spec.name
        print(f"sweep {spec.name}: {len(points)} points of {spec.experiment} -> {sweep_dir}")
        if args.dry_run:
            for point in points:
                print(f"  {point.name}: {' '.join(point.overrides)}")
            return 0
        with sigterm_as_interrupt():  # SIGTERM/SIGHUP stop the running point as Ctrl-C does
            statuses = run_sweep(
                spec, sweep_dir, ray_address=args.ray_address, timeout_s=args.timeout_h * 3600
            )
        record, rows = load_sweep(sweep_dir)
        for path in write_report(sweep_dir, record, rows):
            print(f"wrote {path}")
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk is one line (exit 1); anything else is a bug
        return report_disk_full(exc)
    except KeyboardInterrupt as exc:
        signum = interrupt_signal(exc)
        print(
            f"sweep: {signal.Signals(signum).name}: stopped the running point (recorded as"
            " interrupted); rerun the same command to resume",
            file=sys.stderr,
        )
        return 128 + signum
    failed = [s.name for s in statuses if s.state != "finished"]
    if failed:
        print(f"{len(failed)} of {len(statuses)} points failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

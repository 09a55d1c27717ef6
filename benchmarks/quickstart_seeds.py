"""The quickstart over several seeds: a row per seed, the spread across them, and optionally an
old commit's quickstart timed beside it on the same machine.

Usage: uv run python benchmarks/quickstart_seeds.py [--seeds 0,1,2] [--out DIR] [--old COMMIT]
           [--grpo_precision auto|fp32|bf16_update|bf16] [--timeout_min 45] [--analyse_only]

For each seed in turn, ``bash scripts/quickstart.sh --seed N --out OUT/seed_N``: a complete run
(data, model, SFT, GRPO, the evals), nothing shared between seeds, every random stream moved by
N. Then one row per seed, lowest sampled gain first: the SFT and GRPO models' sampled and greedy
pass@1, the sampled gain with its 95% interval (paired over the held-out prompts), the training
reward's first and last quarter (critic/score/mean), the alarms fired and the seconds; then the
spread across seeds (mean, lowest, highest) and, per seed, which part of a seed-robust recipe's
claim it misses (docs/QUICKSTART.md, "Over seeds": a sampled gain of at least +10 pt with the
interval's low end at least +3 pt, greedy pass@1 not below the SFT model's, the training
reward's last quarter at least 0.08 above its first, no alarm). One seed is one draw; the spread
is the recipe's.

``--old COMMIT`` first runs that commit's quickstart (its own default seed) from a git worktree in
OUT/old_tree, with its own environment, and prints its seconds beside the first seed's, new/old:
the two back to back on one machine. ``--grpo_precision`` goes to this tree's quickstarts (not to
the old commit's, which may not have it). Writes OUT/seeds.md and OUT/seeds.json; ``--analyse_only``
reads the folders already in OUT and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rlvr.common.paths import ROOT
from rlvr.common.processes import run_bounded
from rlvr.cpu.precision import GRPO_PRECISIONS

#: The claim a seed-robust recipe meets on every seed (docs/QUICKSTART.md, "Over seeds").
MIN_GAIN, MIN_LOW, MIN_RISE = 0.10, 0.03, 0.08


@dataclass(frozen=True)
class SeedRow:
    seed: int
    sft_sampled: float
    grpo_sampled: float
    gain: float
    low: float
    high: float
    sft_greedy: float
    grpo_greedy: float
    first_quarter: float | None
    last_quarter: float | None
    rise: float | None  # as the report computed it (its training_score), not recomputed here
    alarms: int
    seconds: float
    precision: str = "fp32"  # GRPO's, as the quickstart decided it (its --grpo_precision)

    @property
    def greedy_gain(self) -> float:
        return self.grpo_greedy - self.sft_greedy

    def misses(self) -> list[str]:
        """The parts of the claim this seed does not meet."""
        missed = []
        if self.gain < MIN_GAIN or self.low < MIN_LOW:
            gain, low = f"+{MIN_GAIN * 100:.0f} pt", f"+{MIN_LOW * 100:.0f} pt"
            missed.append(f"sampled gain below {gain} or low end below {low}")
        if self.greedy_gain < 0:
            missed.append("greedy below SFT")
        if self.rise is None or self.rise < MIN_RISE:
            missed.append(f"training reward rise under {MIN_RISE}")
        if self.alarms:
            missed.append(f"{self.alarms} alarm(s)")
        return missed


def read_row(seed: int, folder: Path) -> SeedRow:
    """One seed's row from its quickstart_report.json (scripts/quickstart_report.py)."""
    report = json.loads((folder / "quickstart_report.json").read_text())
    greedy = next(d for d in report["greedy"] if d["metric"] == "success")
    training = report.get("training_score") or {}
    low, high = report["sampled_pass1_delta_ci95"]
    return SeedRow(
        seed=seed,
        sft_sampled=report["sampled_pass1_before"],
        grpo_sampled=report["sampled_pass1_after"],
        gain=report["sampled_pass1_delta"],
        low=low,
        high=high,
        sft_greedy=greedy["before"],
        grpo_greedy=greedy["after"],
        first_quarter=training.get("first_quarter"),
        last_quarter=training.get("last_quarter"),
        rise=training.get("rise"),
        alarms=len(report["alarms_fired"]),
        seconds=float(report["seconds"]),
        precision=str(report.get("grpo_precision", "fp32")),  # reports before it was recorded
    )


def _pt(value: float) -> str:
    return f"{value * 100:+.2f} pt"


def _quarters(row: SeedRow) -> str:
    if row.first_quarter is None or row.last_quarter is None or row.rise is None:
        return "n/a"
    return f"{row.first_quarter:.3f} -> {row.last_quarter:.3f} ({row.rise:+.3f})"


def table(rows: list[SeedRow]) -> list[str]:
    """A row per seed, lowest sampled gain first, then the spread across seeds."""
    lines = [
        "| seed | GRPO precision | sampled pass@1, SFT -> GRPO | gain [95% CI] "
        "| greedy pass@1, SFT -> GRPO | training reward, first -> last quarter | alarms "
        "| seconds | misses |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in sorted(rows, key=lambda r: r.gain):
        lines.append(
            f"| {row.seed} | {row.precision} | {row.sft_sampled:.2%} -> {row.grpo_sampled:.2%} "
            f"| **{_pt(row.gain)}** "
            f"[{_pt(row.low)}, {_pt(row.high)}] | {row.sft_greedy:.2%} -> {row.grpo_greedy:.2%} "
            f"({_pt(row.greedy_gain)}) | {_quarters(row)} | {row.alarms} | {row.seconds:.0f} | "
            f"{'; '.join(row.misses()) or 'none'} |"
        )
    lines += ["", *spread(rows)]
    return lines


def spread(rows: list[SeedRow]) -> list[str]:
    """Mean, lowest and highest of each figure across the seeds."""
    figures = {
        "sampled gain": [r.gain for r in rows],
        "interval's low end": [r.low for r in rows],
        "greedy gain": [r.greedy_gain for r in rows],
    }
    lines = [f"over {len(rows)} seed(s): | mean | lowest | highest |", "|---|---|---|---|"]
    for name, values in figures.items():
        lines.append(
            f"| {name} | {_pt(statistics.mean(values))} | {_pt(min(values))} | {_pt(max(values))} |"
        )
    rises = [r.rise for r in rows if r.rise is not None]
    if rises:
        lines.append(
            f"| training reward rise | {statistics.mean(rises):+.3f} | {min(rises):+.3f} "
            f"| {max(rises):+.3f} |"
        )
    seconds = [r.seconds for r in rows]
    lines.append(f"| seconds | {statistics.mean(seconds):.0f} | {min(seconds):.0f} "
                 f"| {max(seconds):.0f} |")  # fmt: skip
    return lines


def quickstart_env(tree: Path) -> dict[str, str]:
    """The caller's environment for a quickstart in ``tree``, minus what ties it to this one's
    virtual environment (an old tree syncs its own)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "RLVR_UV_SYNCED")}
    env.pop("WANDB_API_KEY", None)
    return env | {"WANDB_MODE": "offline"}


def run_quickstart(tree: Path, args: list[str], out: Path, timeout_s: float) -> float:
    """``bash scripts/quickstart.sh ARGS --out OUT`` in ``tree``; its wall seconds. A failed run
    stops the benchmark with its log's tail."""
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.log"
    print(f"== {tree.name}: quickstart.sh {' '.join(args)} --out {out} (log: {log})", flush=True)
    start = time.monotonic()
    cmd = ["bash", "scripts/quickstart.sh", *args, "--out", str(out)]
    done = run_bounded(cmd, quickstart_env(tree), timeout_s, tree, log)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise SystemExit(f"{tail}\nquickstart failed (exit {done.returncode}); log: {log}")
    print(f"   {seconds:.0f} s", flush=True)
    return seconds


def old_tree(commit: str, folder: Path) -> Path:
    """A detached worktree of ``commit`` at ``folder`` (replaced if there)."""
    if folder.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT, check=False)
        shutil.rmtree(folder, ignore_errors=True)
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(folder), commit], cwd=ROOT, check=True
    )
    return folder


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds", default="0,1,2", help="quickstart --seed values, comma-separated"
    )
    parser.add_argument("--out", default="/tmp/quickstart_seeds", help="a folder per seed")
    parser.add_argument("--old", help="also time this commit's quickstart first (its own seed)")
    parser.add_argument(
        "--grpo_precision",
        choices=GRPO_PRECISIONS,
        default=GRPO_PRECISIONS[0],
        help="quickstart.sh --grpo_precision for each seed (%(default)s; not for --old)",
    )
    parser.add_argument("--timeout_min", type=float, default=45.0, help="hard limit per run")
    parser.add_argument("--analyse_only", action="store_true", help="run nothing, read OUT")
    args = parser.parse_args(argv)
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: whole numbers separated by commas, like 0,1,2")
    if not args.seed_list or min(args.seed_list) < 0:
        parser.error(f"--seeds {args.seeds!r}: at least one seed, none negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    timeout_s = args.timeout_min * 60
    timed: dict[str, float] = {}
    if not args.analyse_only:
        if args.old:
            tree = old_tree(args.old, out / "old_tree")
            timed["old"] = run_quickstart(tree, [], out / "old", timeout_s)
        for seed in args.seed_list:
            timed[f"seed_{seed}"] = run_quickstart(
                ROOT,
                ["--seed", str(seed), "--grpo_precision", args.grpo_precision],
                out / f"seed_{seed}",
                timeout_s,
            )
    missing = [
        s for s in args.seed_list if not (out / f"seed_{s}/quickstart_report.json").is_file()
    ]
    if missing:
        print(
            f"error: no quickstart_report.json for seed(s) {missing} under {out}", file=sys.stderr
        )
        return 2
    rows = [read_row(seed, out / f"seed_{seed}") for seed in args.seed_list]
    lines = table(rows)
    if "old" in timed:
        seed, old = args.seed_list[0], timed["old"]
        new = timed[f"seed_{seed}"]
        lines.append(f"\nwall seconds, back to back: old ({args.old}) {old:.0f}, new (seed {seed}) "
                     f"{new:.0f}, new/old {new / old:.2f}")  # fmt: skip
    print("\n".join(lines))
    (out / "seeds.md").write_text("\n".join(lines) + "\n")
    records = {"rows": [asdict(r) | {"misses": r.misses()} for r in rows], "wall_seconds": timed}
    (out / "seeds.json").write_text(json.dumps(records, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

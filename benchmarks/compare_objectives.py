"""Objective presets on the learnable CPU recipe: the same steps and seeds, one figure, one table.

Usage: uv run --no-sync python benchmarks/compare_objectives.py [--out /tmp/cmp]
           [--presets grpo,dr_grpo,dapo,gspo,reinforce_nanochat,tuft_is] [--seeds 1,2]
           [--timeout_min 20] [--deadline_min 90] [--analyse_only]

1. Writes the quickstart's generated Countdown data (scripts/quickstart.sh's arguments, 32 test
   prompts) into OUT/data, offline.
2. Runs every preset x seed of countdown_smollm2_cpu through the sweep runner (rlvr.sweep:
   OUT/sweep/runs/<point>/, checkpoints off, each point killed after --timeout_min), seed 1 of
   every preset first; no run starts later than --deadline_min minutes after the command began.
   Validation before training and at the last step samples 4 answers per test prompt at the
   training temperature (0.7), and verl dumps every sample into the run's
   checkpoints/validation/<step>.jsonl.
3. Prints and writes OUT/objectives.md (objective_comparison.markdown_table) and
   OUT/objectives_cpu.png (critic/score/mean per step, a colour per preset, a line per seed).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import objective_comparison as compare  # beside this script, which python puts on sys.path

from rlvr.common.paths import ROOT
from rlvr.sweep.runner import checked_points

EXPERIMENT = "countdown_smollm2_cpu"
PRESETS = "grpo,dr_grpo,dapo,gspo,reinforce_nanochat,tuft_is"
# countdown_smollm2_cpu answers in 24 tokens: DAPO's overlong buffer is its last fifth
# (objective/dapo.yaml's 204 is for the 1024-token GPU budget; pre-flight refuses it here).
# nanochat's REINFORCE (gpg: no ratio) learns on policy: one update per batch, not the
# experiment's two (its mini batch of 6 prompts); the interpolation follows the batch.
ONE_MINI_BATCH = "actor_rollout_ref.actor.ppo_mini_batch_size=${data.train_batch_size}"
PRESET_OVERRIDES = {
    "dapo": ["reward_model.reward_kwargs.overlong_buffer_cfg.len=4"],
    "reinforce_nanochat": [ONE_MINI_BATCH],
}
# scripts/quickstart.sh's data: easy generated tasks, few-shot template.
DATA_ARGS = ["--source", "generate", "--template", "fewshot", "--num_range", "2,2",
             "--max_number", "10", "--target_range", "1,20", "--train_size", "512"]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="/tmp/cmp", help="data, runs, table and figure")
    parser.add_argument("--presets", default=PRESETS, help="objective presets, comma-separated")
    parser.add_argument("--seeds", default="1,2", help="data.seed values, comma-separated")
    parser.add_argument("--prompts", type=int, default=32, help="validation prompts")
    parser.add_argument("--samples", type=int, default=4, help="validation samples per prompt")
    parser.add_argument("--temperature", type=float, default=0.7, help="validation sampling")
    parser.add_argument("--timeout_min", type=float, default=20.0, help="hard limit per run")
    parser.add_argument(
        "--deadline_min", type=float, help="start no run later than this many minutes from now"
    )
    parser.add_argument("--analyse_only", action="store_true", help="run nothing, read OUT")
    args = parser.parse_args()
    deadline = None if args.deadline_min is None else time.time() + args.deadline_min * 60

    out = Path(args.out).resolve()
    presets = [p for p in args.presets.split(",") if p]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    overrides = [
        f"paths.data={out / 'data'}",
        "trainer.resume_mode=disable",
        # Its own Ray: never joins (or is stopped with) another job's cluster on this machine.
        f"+ray_kwargs.ray_init._temp_dir={out / 'ray'}",
        *compare.validation_overrides(args.samples, args.temperature, args.prompts),
    ]
    spec = compare.comparison_spec("objectives", EXPERIMENT, presets, seeds, overrides)
    sweep_dir = out / "sweep"

    if not args.analyse_only:
        subprocess.run(
            [sys.executable, str(ROOT / "scripts/data_prep_countdown.py"), *DATA_ARGS,
             "--test_size", str(args.prompts), "--local_dir", str(out / "data/countdown")],
            check=True, cwd=ROOT,
        )  # fmt: skip
        for one in compare.point_specs(spec, PRESET_OVERRIDES):
            checked_points(one)  # every point's config through verl's checks before any run
        compare.run_points(
            spec, sweep_dir, args.timeout_min * 60, deadline, preset_overrides=PRESET_OVERRIDES
        )

    results, missing = compare.read_runs(spec, sweep_dir)
    groups = compare.by_preset(results, presets)
    if not groups:
        print(f"no finished run under {sweep_dir}", file=sys.stderr)
        return 1
    table = compare.markdown_table(groups)
    note = f"\nNot finished or not run: {', '.join(missing)}\n" if missing else ""
    (out / "objectives.md").write_text(table + note)
    figure = compare.plot_curves(
        groups,
        out / "objectives_cpu.png",
        f"{EXPERIMENT}: objective presets",
        # verl's dapo reward manager adds the overlong penalty to the reward it logs and trains on
        notes={"dapo": "incl. overlong penalty"},
    )
    print(table + note)
    print(f"wrote {out / 'objectives.md'}, {figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

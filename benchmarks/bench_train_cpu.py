"""CPU GRPO step speed: an old commit against the current tree, side by side, same config and data.

Usage: uv run --no-sync python benchmarks/bench_train_cpu.py [--steps 3] [--repeats 1]
           [--old a3b0be1] [--quickstart [--model DIR]] [--timeout_s 1800] [--work DIR] [--keep]

Both run ``bash scripts/train.sh countdown_cpu base_model=smollm2_135m``, each with its own
launcher and configs, on the quickstart's data (generated Countdown, few-shot template, 512 train
rows, built once, offline) and SmolLM2-135M-Instruct (``scripts/build_model.py smollm2``), for
``--steps`` training steps with no validation and no checkpoint, so only steps are timed. The old
commit runs from a ``git worktree`` in the work folder, on this environment's python (removed at
the end). With ``--quickstart`` both run the quickstart's GRPO instead: ``countdown_smollm2_cpu``
(12 prompts x 20 responses of up to 24 tokens) on its data (QUICKSTART_DATA),
from ``--model`` (a quickstart run's SFT model, say). Repetitions alternate which side goes
first. Each launch has a hard timeout and its own Ray temp dir, and only that Ray's leftover
processes are cleaned up.

Per-step metrics come from each run's structured records: the current tree's ``metrics.jsonl``
(verl's file logger, ``rlvr.report.metrics_log.read_steps``) and, for a commit without it (such as
a3b0be1), its offline wandb run file (``tests/wandb_run_file.py``, loaded by path). The table
holds the median of each ``timing_s/*`` key over the steps after the first (which warms up), and
of ``perf/throughput``, verl's tokens (prompt and response) per second per GPU; the last line is
``ratio: new/old`` of the median throughputs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.common import processes
from rlvr.report.metrics_log import read_steps

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = ROOT / "artifacts/models/smollm2-135m-instruct"
THROUGHPUT = "perf/throughput"
TIMINGS = ("gen", "old_log_prob", "ref", "update_actor", "reward", "adv", "step")
CHECKS = ("rollout_corr/log_ppl_abs_diff", "rollout_corr/kl", "actor/entropy")
PREP_TIMEOUT_S = 900


@dataclass
class Run:
    side: str  # "old" or "new"
    repeat: int
    seconds: float
    rows: dict[int, dict[str, float]]  # training step -> metrics


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--steps", type=int, default=3, help="training steps per run (>= 2)")
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each side, alternating which goes first"
    )
    parser.add_argument("--old", default="a3b0be1", help="the commit to compare against")
    parser.add_argument(
        "--timeout_s", type=float, default=1800, help="hard limit for each training launch"
    )
    parser.add_argument(
        "--work", default=None, help="work folder (default: a new temp folder, removed after)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, data)")
    parser.add_argument(
        "--quickstart",
        action="store_true",
        help="time the quickstart's GRPO (countdown_smollm2_cpu on its data) instead",
    )
    parser.add_argument(
        "--model", type=Path, default=MODEL_DIR, help="the model both sides start from"
    )
    args = parser.parse_args(argv)
    if args.steps < 2 or args.repeats < 1:
        parser.error("--steps must be >= 2 (the first step is warm-up) and --repeats >= 1")
    return args


def _checked(cmd: list[str], cwd: Path, timeout_s: float = PREP_TIMEOUT_S) -> None:
    done = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{done.stdout[-2000:]}{done.stderr[-3000:]}")


#: bench_train_cpu's data: generated Countdown, few-shot template.
FEWSHOT_DATA = ("--source", "generate", "--template", "fewshot",
                "--train_size", "512", "--test_size", "32")  # fmt: skip
#: scripts/quickstart.sh's data prep for SmolLM2 (DATA_ARGS, --train_size, --test_size), for
#: --quickstart and bench_grpo_vs_trl; tests/test_bench_grpo_vs_trl.py checks they still are.
QUICKSTART_DATA = ("--source", "generate", "--template", "compact", "--sft", "--num_range", "2,3",
                   "--max_number", "10", "--target_range", "1,30",
                   "--train_size", "1024", "--test_size", "96")  # fmt: skip


def prepare_data(
    work: Path, data_args: tuple[str, ...] = FEWSHOT_DATA, note: str = "few-shot template"
) -> Path:
    """Generated Countdown data under ``work/data/countdown``, offline; returns ``work/data``."""
    data = work / "data"
    print(f"== data: generated Countdown, {note} -> {data}", flush=True)
    cmd = [sys.executable, "scripts/data_prep_countdown.py", *data_args]
    _checked([*cmd, "--local_dir", str(data / "countdown")], ROOT)
    return data


def build_model() -> Path:
    """SmolLM2-135M-Instruct in MODEL_DIR (``scripts/build_model.py smollm2``, offline)."""
    print(f"== model: {MODEL_DIR} (scripts/build_model.py smollm2)", flush=True)
    _checked([sys.executable, "scripts/build_model.py", "smollm2"], ROOT)
    return MODEL_DIR


def add_worktree(commit: str, folder: Path) -> Path:
    print(f"== old code: git worktree add {folder} {commit}", flush=True)
    _checked(["git", "worktree", "add", "--detach", str(folder), commit], ROOT, 120)
    return folder


def remove_worktree(folder: Path) -> None:
    if folder.exists():
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(folder)],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )
        print(f"== removed worktree {folder}", flush=True)


#: The launch's experiment and its overrides, its run name (bench_grpo_vs_trl passes others).
EXPERIMENT = ("countdown_cpu", "base_model=smollm2_135m")
QUICKSTART_EXPERIMENT = ("countdown_smollm2_cpu",)
RUN_NAME = "bench_train_cpu"


def launch(
    tree: Path,
    out: Path,
    data: Path,
    steps: int,
    timeout_s: float,
    experiment: tuple[str, ...] = EXPERIMENT,
    model: Path = MODEL_DIR,
    name: str = RUN_NAME,
) -> float:
    """One training launch of ``tree``'s own launcher; returns its wall seconds."""
    out.mkdir(parents=True)
    ray_tmp = tempfile.mkdtemp(prefix="rlvr-bench-", dir="/tmp")  # short: socket paths
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),  # that tree's rlvr, also in the Ray workers
        "UV_PROJECT_ENVIRONMENT": str(Path(sys.executable).parents[1]),  # this environment
        # as synced: the old tree's launcher would otherwise `uv sync` this environment to its
        # lock and point its editable install at the worktree, which is removed at the end
        "RLVR_UV_SYNCED": str(tree),
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
        "RLVR_LOG_DIR": str(out / "logs"),
        "WANDB_MODE": "offline",
    }
    env.pop("WANDB_API_KEY", None)
    cmd = [
        "bash",
        "scripts/train.sh",
        *experiment,
        f"paths.data={data}",
        f"paths.checkpoints={out / 'checkpoints'}",
        f"actor_rollout_ref.model.path={model}",
        f"trainer.experiment_name={name}",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
    ]
    try:
        done = processes.run_bounded(cmd, env, timeout_s, tree, out / "output.log", [ray_tmp])
    finally:
        leftovers = processes.reap([ray_tmp])
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if leftovers:
        print(f"   killed {len(leftovers)} leftover Ray processes of this run", flush=True)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: exit {done.returncode}; log {out / 'output.log'}")
    return done.seconds


def _wandb_run_file() -> Any:
    """tests/wandb_run_file.py: the tests' reader of wandb's offline run files."""
    spec = importlib.util.spec_from_file_location(
        "wandb_run_file", ROOT / "tests/wandb_run_file.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_rows(out: Path, name: str = RUN_NAME) -> dict[int, dict[str, float]]:
    """Training steps (those with a throughput): from the run's ``metrics.jsonl`` when its tree
    writes one (verl's file logger, flushed per step), else from its one offline wandb run."""
    metrics = out / "checkpoints" / name / "metrics.jsonl"
    if metrics.is_file():
        rows = {record.step: record.metrics for record in read_steps(metrics)}
    else:
        runs = sorted((out / "logs/wandb").glob("offline-run-*/run-*.wandb"))
        if len(runs) != 1:
            raise SystemExit(f"{out}: {len(runs)} wandb run files, expected 1")
        history, _ = _wandb_run_file().wandb_history(runs[0])
        rows = {
            step: {k: float(v) for k, v in row.items() if isinstance(v, int | float)}
            for step, row in history.items()
        }
    return {step: row for step, row in rows.items() if THROUGHPUT in row}


def run_side(
    side: str, tree: Path, repeat: int, work: Path, data: Path, args: argparse.Namespace
) -> Run:
    out = work / "runs" / f"{side}_{repeat}"
    print(f"== {side} #{repeat + 1}: {args.steps} steps from {tree}", flush=True)
    experiment = QUICKSTART_EXPERIMENT if args.quickstart else EXPERIMENT
    seconds = launch(tree, out, data, args.steps, args.timeout_s, experiment, args.model)
    rows = read_rows(out)
    if sorted(rows) != list(range(1, args.steps + 1)):
        raise SystemExit(f"{out}: steps {sorted(rows)}, expected 1..{args.steps}")
    for step, row in sorted(rows.items()):
        print(
            f"   step {step}: {row[THROUGHPUT]:6.1f} tokens/s, step {row['timing_s/step']:6.1f} s",
            flush=True,
        )
    print(f"   launch took {seconds:.0f} s", flush=True)
    return Run(side, repeat, seconds, rows)


def median_after_warmup(runs: list[Run], side: str, key: str) -> float | None:
    values = [
        row[key]
        for run in runs
        if run.side == side
        for step, row in run.rows.items()
        if step > 1 and key in row
    ]
    return statistics.median(values) if values else None


def report(runs: list[Run], old: str) -> float:
    """Print the old/new table; return new/old of the median throughputs."""

    def cell(value: float | None, digits: int = 2) -> str:
        return f"{value:10.{digits}f}" if value is not None else f"{'-':>10}"

    steps_used = sum(1 for r in runs if r.side == "new" for s in r.rows if s > 1)
    print(f"\nmedian over steps after the first ({steps_used} steps per side)")
    print(f"{'metric':<28}{'old ' + old:>12}{'new':>10}")
    for name in TIMINGS:
        key = f"timing_s/{name}"
        old_v, new_v = (median_after_warmup(runs, side, key) for side in ("old", "new"))
        if old_v is not None or new_v is not None:
            print(f"{key:<28}{cell(old_v):>12}{cell(new_v)}")
    for key in CHECKS:
        new_v = median_after_warmup(runs, "new", key)
        if new_v is not None:
            old_v = median_after_warmup(runs, "old", key)
            print(f"{key:<28}{cell(old_v, 6):>12}{cell(new_v, 6)}")
    old_t = median_after_warmup(runs, "old", THROUGHPUT)
    new_t = median_after_warmup(runs, "new", THROUGHPUT)
    assert old_t is not None and new_t is not None
    print(f"{THROUGHPUT + ' (tokens/s)':<28}{cell(old_t):>12}{cell(new_t)}")
    return new_t / old_t


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-train-cpu-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    old_tree = work / "old"
    runs: list[Run] = []
    try:
        if args.quickstart:
            data = prepare_data(work, QUICKSTART_DATA, "the quickstart's compact template")
        else:
            data = prepare_data(work)
        if args.model == MODEL_DIR:  # built offline once; a --model folder is used as given
            build_model()
        add_worktree(args.old, old_tree)
        for repeat in range(args.repeats):
            order = [("old", old_tree), ("new", ROOT)]
            for side, tree in order if repeat % 2 == 0 else order[::-1]:
                runs.append(run_side(side, tree, repeat, work, data, args))
    finally:
        remove_worktree(old_tree)
        if not args.keep and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    ratio = report(runs, args.old)
    print(f"ratio: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

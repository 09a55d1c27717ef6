"""CPU GRPO step: this project's verl run against TRL's GRPOTrainer, same experiment, in turn.

Usage: uv run --no-sync python benchmarks/bench_grpo_vs_trl.py [--steps 3] [--model DIR]
           [--experiment countdown_smollm2_cpu] [--order ours-first|trl-first]
           [--trl_micro_batch 40] [--timeout_s 1800] [--work DIR] [--keep]

What runs. The data is the quickstart's (scripts/quickstart.sh's data prep flags: generated
Countdown, compact template, offline), the model ``--model`` (default SmolLM2-135M-Instruct, built
offline by ``scripts/build_model.py smollm2`` when missing; pass a quickstart run's SFT model to
time from there). Ours: ``bash scripts/train.sh countdown_smollm2_cpu`` with that model, for
``--steps`` steps, no validation, no checkpoint (bench_train_cpu.launch: hard timeout, own Ray temp
dir, its leftovers reaped); per-step ``timing_s/*`` from its metrics.jsonl. TRL: TRL 0.24.0's
GRPOTrainer in an environment of its own (benchmarks/trl_env.py, pinned by
benchmarks/trl_requirements.txt; torch is the project's), run by benchmarks/trl_grpo_step.py on the
same Parquet, model and reward file with the experiment's knobs read from the composed config
(batch of prompts x group size per optimizer step, response length, temperature, top-p, lr, KL
coefficient and estimator, clip, AdamW settings, token-mean loss, fp32, SDPA, no gradient
checkpointing, all cores; forward and backward in micro batches of ``--trl_micro_batch``). Both
sides' s/step is the median over the steps after the first (warm-up); the ratio is TRL's s/step
over ours (above 1: ours is faster).

What it does not prove. The generation engines differ (verl's HF rollout against TRL's own
``model.generate`` over the batch), as do the training loops (verl's FSDP2 worker with this
project's CPU packing and malloc settings, rlvr/cpu; TRL's accelerate + Trainer); sampled answers
differ, so each side's response lengths (which set most of the cost) are printed beside its time.
verl's ``grpo_drop_constant`` masks all-alike groups out of the loss where TRL keeps them at
advantage 0 (same compute, other loss); TRL 0.24's Trainer also divides the ``dapo`` loss by the
accumulation steps (a smaller gradient, which AdamW mostly normalizes away). Our s/step is verl's
``timing_s/step`` (its profiler hooks and logging, outside it, take milliseconds); TRL's is the
wall from one step's end to the next. Three steps on a shared 2-core machine are a few noisy
samples; neither side's learning is compared here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import bench_train_cpu as verl_bench  # beside this script, which python puts on sys.path
import trl_env

from rlvr.common import processes

ROOT = Path(__file__).resolve().parents[1]
TRL_SCRIPT = Path(__file__).resolve().parent / "trl_grpo_step.py"
RUN_NAME = "bench_grpo_vs_trl"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--steps", type=int, default=3, help="optimizer steps per side, >= 2 (default 3)"
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=verl_bench.MODEL_DIR,
        help="the model folder (HF format) both sides start from (default: the base "
        "SmolLM2-135M-Instruct, built when missing; a quickstart run's SFT model works too)",
    )
    parser.add_argument(
        "--experiment",
        default="countdown_smollm2_cpu",
        help="the experiment both sides run (default: the quickstart's countdown_smollm2_cpu)",
    )
    parser.add_argument(
        "--order",
        choices=("ours-first", "trl-first"),
        default="ours-first",
        help="which side runs first (default ours-first)",
    )
    parser.add_argument(
        "--trl_micro_batch",
        type=int,
        default=40,
        help="completions per forward/backward on TRL's side (default 40: six micro batches of "
        "the quickstart's 12 x 20 batch, padded and unpacked; 64 in one needed ~14 GB, where "
        "verl's packed 4 x 16 one needed ~6.5 GB)",
    )
    parser.add_argument(
        "--timeout_s",
        type=float,
        default=1800,
        help="hard limit in seconds for each side's run (default 1800)",
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="work folder (default: a temp folder, removed)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, data)")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step is warm-up)")
    args.model = args.model.resolve()
    return args


def experiment_knobs(config: Any) -> dict[str, Any]:
    """The knobs of a composed experiment that TRL's side is given (trl_grpo_step maps them)."""
    data, algorithm = config.data, config.algorithm
    model, actor = config.actor_rollout_ref.model, config.actor_rollout_ref.actor
    rollout, optim = config.actor_rollout_ref.rollout, config.actor_rollout_ref.actor.optim
    warmup = max(int(optim.lr_warmup_steps or 0), 0)
    if float(optim.lr_warmup_steps_ratio or 0) > 0:
        warmup = max(warmup, 1)
    return {
        "train_batch_size": int(data.train_batch_size),
        "n": int(rollout.n),
        "max_prompt_length": int(data.max_prompt_length),
        "max_response_length": int(data.max_response_length),
        "temperature": float(rollout.temperature),
        "top_p": float(rollout.top_p),
        "top_k": int(rollout.top_k),
        "lr": float(optim.lr),
        "lr_warmup_steps": warmup,
        "lr_scheduler_type": str(optim.lr_scheduler_type or optim.warmup_style or "constant"),
        "weight_decay": float(optim.weight_decay),
        "betas": [float(b) for b in optim.betas],
        "grad_clip": float(actor.grad_clip),
        "use_kl_loss": bool(actor.use_kl_loss),
        "kl_loss_coef": float(actor.kl_loss_coef),
        "kl_loss_type": str(actor.kl_loss_type),
        "loss_agg_mode": str(actor.loss_agg_mode),
        "ppo_mini_batch_size": int(actor.ppo_mini_batch_size),
        "ppo_epochs": int(actor.ppo_epochs),
        "clip_ratio_low": float(actor.clip_ratio_low or actor.clip_ratio),
        "clip_ratio_high": float(actor.clip_ratio_high or actor.clip_ratio),
        "norm_adv_by_std_in_grpo": bool(algorithm.norm_adv_by_std_in_grpo),
        "adv_estimator": str(algorithm.adv_estimator),
        "enable_gradient_checkpointing": bool(model.enable_gradient_checkpointing),
        "attn_implementation": str(model.override_config.get("attn_implementation", "sdpa")),
        "reward_path": str(config.custom_reward_function.path),
        "reward_kwargs": dict(config.custom_reward_function.reward_kwargs),
        "seed": 0,
    }


def composed_knobs(experiment: str, model: Path) -> dict[str, Any]:
    from rlvr.config.compose import compose

    return experiment_knobs(compose(experiment, [f"actor_rollout_ref.model.path={model}"]))


def run_ours(args: argparse.Namespace, work: Path, data: Path) -> dict[str, Any]:
    out = work / "ours"
    print(f"== ours: {args.experiment}, {args.steps} steps (log {out / 'output.log'})", flush=True)
    seconds = verl_bench.launch(
        ROOT, out, data, args.steps, args.timeout_s, (args.experiment,), args.model, RUN_NAME
    )
    rows = verl_bench.read_rows(out, RUN_NAME)
    if sorted(rows) != list(range(1, args.steps + 1)):
        raise SystemExit(f"{out}: steps {sorted(rows)}, expected 1..{args.steps}")
    for step, row in sorted(rows.items()):
        print(
            f"   step {step}: {row['timing_s/step']:6.1f} s, response length "
            f"{row.get('response_length/mean', float('nan')):5.1f}, reward "
            f"{row.get('critic/score/mean', float('nan')):.3f}",
            flush=True,
        )
    print(f"   launch took {seconds:.0f} s", flush=True)
    return {"seconds": seconds, "rows": rows}


def run_trl(args: argparse.Namespace, work: Path, data: Path, knobs: dict[str, Any]) -> dict:
    python = trl_env.ensure_env()
    out = work / "trl"
    out.mkdir(parents=True)
    knobs = {**knobs, "micro_batch": args.trl_micro_batch}
    (out / "knobs.json").write_text(json.dumps(knobs, indent=1))
    log = out / "output.log"
    print(f"== TRL: GRPOTrainer, {args.steps} steps (log {log})", flush=True)
    cmd = [str(python), str(TRL_SCRIPT), "--knobs", str(out / "knobs.json"),
           "--data", str(data / "countdown/train.parquet"), "--model", str(args.model),
           "--steps", str(args.steps), "--out", str(out / "steps.json"),
           "--work", str(out / "trainer")]  # fmt: skip
    env = {**os.environ, "PYTHONNOUSERSITE": "1", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "CUDA_VISIBLE_DEVICES"):
        env.pop(name, None)
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU, as ours
    done = processes.run_bounded(cmd, env, args.timeout_s, ROOT, log)
    # Its per-step lines, also when it failed or timed out part way (the steps done still count).
    # Trainer logs once more at the end of training, so a step's line can come twice: one
    # record per step, the last one printed.
    by_step = {}
    for line in log.read_text(errors="replace").splitlines():
        if "TRL step {" in line:
            record = json.loads(line.split("TRL step ", 1)[1])
            by_step[record["step"]] = record
    steps = [by_step[step] for step in sorted(by_step)]
    for record in steps:
        print(
            f"   step {record['step']}: {record['seconds']:6.1f} s, response length "
            f"{record.get('completions/mean_length', float('nan')):5.1f}, reward "
            f"{record.get('reward', float('nan')):.3f}",
            flush=True,
        )
    print(f"   run took {done.seconds:.0f} s", flush=True)
    result: dict[str, Any] = {"steps": steps, "run_seconds": done.seconds}
    if done.returncode != 0:
        why = "timed out" if done.returncode == 124 else f"exit {done.returncode}"
        print(f"   TRL failed ({why}); log {log}:\n{done.output[-2000:]}", flush=True)
        result["failed"] = why
    return result


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(ours: dict[str, Any] | None, trl: dict[str, Any] | None, steps: int) -> float | None:
    """Print the table and our timing breakdown; return TRL's s/step over ours (None when a side
    has no timed step)."""
    our_rows = [row for step, row in ours["rows"].items() if step > 1] if ours else []
    trl_rows = [r for r in trl["steps"] if r["step"] > 1] if trl else []
    our_s = _median([r["timing_s/step"] for r in our_rows])
    trl_s = _median([r["seconds"] for r in trl_rows])
    our_len = _median([r["response_length/mean"] for r in our_rows if "response_length/mean" in r])
    trl_len = _median(
        [r["completions/mean_length"] for r in trl_rows if "completions/mean_length" in r]
    )
    print(f"\nmedian over steps 2..{steps} (step 1 is warm-up)")
    print(f"{'side':<20}{'s/step':>10}{'steps timed':>13}{'resp tokens':>13}{'run wall s':>12}")
    for side, s_step, timed, length, result, wall_key in (
        ("ours (verl)", our_s, len(our_rows), our_len, ours, "seconds"),
        (f"TRL {trl_env.TRL_VERSION}", trl_s, len(trl_rows), trl_len, trl, "run_seconds"),
    ):
        wall = result[wall_key] if result else float("nan")
        note = f"  ({result['failed']})" if result and result.get("failed") else ""
        print(f"{side:<20}{s_step:>10.2f}{timed:>13}{length:>13.1f}{wall:>12.0f}{note}")
    ratio = trl_s / our_s if our_rows and trl_rows else None
    if ratio is None:
        print("ratio: - (a side has no timed step)")
    else:
        print(f"ratio (ours/TRL speed = TRL s/step / ours s/step): {ratio:.2f}x")
    keys = sorted({k for r in our_rows for k in r if k.startswith("timing_s/")})
    medians = {k: _median([r[k] for r in our_rows if k in r]) for k in keys}
    if keys:
        print("\nours: where a step's time goes (timing_s/*, median over the timed steps)")
    for key in sorted(keys, key=lambda k: -medians[k]):
        share = 100 * medians[key] / our_s if key != "timing_s/step" else 100.0
        print(f"  {key:<36}{medians[key]:>9.2f} s{share:>7.1f}%")
    return ratio


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = (args.work or Path(tempfile.mkdtemp(prefix="bench-grpo-vs-trl-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        data = verl_bench.prepare_data(
            work, verl_bench.QUICKSTART_DATA, "the quickstart's compact template"
        )
        if (
            args.model == verl_bench.MODEL_DIR.resolve()
            and not (args.model / "config.json").is_file()
        ):
            verl_bench.build_model()
        if not (args.model / "config.json").is_file():
            raise SystemExit(f"--model {args.model}: no config.json (an HF model folder?)")
        knobs = composed_knobs(args.experiment, args.model)
        print(f"== knobs of {args.experiment}: {json.dumps(knobs)}", flush=True)
        sides = ["ours", "trl"] if args.order == "ours-first" else ["trl", "ours"]
        results: dict[str, Any] = {"ours": None, "trl": None}
        for side in sides:
            if side == "ours":
                try:
                    results[side] = run_ours(args, work, data)
                except SystemExit as failed:  # the other side still runs
                    print(f"   ours failed: {failed}", flush=True)
            else:
                results[side] = run_trl(args, work, data, knobs)
        ratio = report(results["ours"], results["trl"], args.steps)
    finally:
        if args.keep or args.work is not None:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    any_failed = results["ours"] is None or results["trl"].get("failed")
    return 1 if any_failed or ratio is None else 0


if __name__ == "__main__":
    sys.exit(main())

"""CPU rehearsal of a GPU experiment at its real world size, through the real launcher.

Usage: python -m rlvr.rehearsal.cpu EXPERIMENT [--objective NAME] [--out DIR]
          [--gpus_per_node N] [--timeout_s S]
   (or: bash scripts/rehearse.sh EXPERIMENT [--objective NAME] ...)

Runs the experiment's own composed config (batch sizes, group size, mini/micro batches, dynamic
batching, sharding, checkpoint contents, LoRA, nnodes x n_gpus_per_node) through
``scripts/train.sh``, verl and Ray on CPU, with fake Ray GPUs and gloo. Replaced, and
nothing else: the model (the tiny random one), the rollout engine (HF generate), dtype (fp32),
attention (SDPA), lengths (short), steps (2, then 3 on resume), data (generated). The
objective preset (configs/objective/, ``--objective``, default grpo) is passed as
``objective=NAME``, exactly as a launch would. A multi-node
experiment runs as that many Ray nodes on this machine, joined by ``scripts/ray_cluster.sh``.
Checks that results are right, not only that it ran: before any launch, verl's own actor update
under the experiment's batching against a gradient computed outside verl ("gradient scale");
for a multi-node experiment, step 1 of its run on its own nodes against one node of the same
world size ("topology"; that run and its resume score by a stand-in reward,
rlvr/rehearsal/reward.py, so that step 1 has a gradient). Exit 0 when every check holds;
otherwise the step that failed and why, exit 1.

``--gpu``: the same checks on a real GPU node with the real stack and a small hub model, plus
the peak GPU memory against the planner's (rlvr/rehearsal/gpu.py); ``--gpu --dry_run``
lists its checks and tolerances without a GPU and writes nothing.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlvr.common.cli import OneLineParser
from rlvr.common.paths import ROOT
from rlvr.common.processes import reap, stop
from rlvr.common.signals import interrupt_signal, sigterm_as_interrupt
from rlvr.rehearsal import checks
from rlvr.rehearsal.launch import (
    Cluster,
    launch,
    one_node_step_one,
    scored_by_stand_in,
    start_ray,
    topology,
)
from rlvr.rehearsal.plan import Plan, make_plan, prepare_inputs
from rlvr.rehearsal.steps import Runner, cleanup_row, report, resumed


def rehearse(plan: Plan, timeout_s: float) -> int:
    python = sys.executable
    runner = Runner()
    ray_tmp = tempfile.mkdtemp(prefix="rlvr-reh-", dir="/tmp")  # Ray socket paths stay short
    cluster = Cluster(None, [ray_tmp])
    start, peak, machine = time.monotonic(), 0, 0
    try:
        runner.step("prepare", lambda: prepare_inputs(plan))
        runner.step("gradient scale", lambda: _gradient_scale(plan))
        if plan.nnodes > 1:
            plan = scored_by_stand_in(plan)
            name = f"one node x {plan.world_size}, step 1"
            runner.step(name, lambda: one_node_step_one(plan, timeout_s))
        cluster = runner.step("ray", lambda: start_ray(plan, ray_tmp))
        train = runner.step("train 2 steps", lambda: launch(plan, cluster, 2, "train", timeout_s))
        peak, machine = train.peak_bytes, train.peak_machine_bytes
        world, actor = plan.world_size, plan.actor_dir
        config = plan.config()
        metrics = Path(config.paths.metrics)
        if plan.nnodes > 1:
            runner.step("topology", lambda: topology(plan, metrics))
        runner.step("devices", lambda: checks.devices(plan.out / "trace_train", world, python))
        runner.step("shards", lambda: checks.shards(actor, world, plan.save_contents))
        runner.step("checkpoint bytes", lambda: checks.checkpoint_bytes(actor, config))
        runner.step("actor state", lambda: checks.actor_state_per_rank(actor, config, world))
        lora_dir = actor / "lora_adapter" if plan.lora else None
        runner.step("huggingface", lambda: checks.loads_strictly(actor / "huggingface", lora_dir))
        runner.step("metrics", lambda: checks.logged_steps(metrics, [1, 2]))
        wandb_dir = plan.out / "logs/wandb"
        runner.step("wandb", lambda: checks.wandb_run(wandb_dir, set()))
        known = set(wandb_dir.glob("offline-run-*/run-*.wandb")), metrics.stat().st_size
        resume = runner.step("resume", lambda: launch(plan, cluster, 3, "resume", timeout_s))
        peak, machine = max(peak, resume.peak_bytes), max(machine, resume.peak_machine_bytes)
        runner.step("resumed", lambda: resumed(plan, metrics, known))
    except checks.RehearsalFailure:
        pass
    finally:
        # Our own cluster is ours to stop; everything else must have exited by itself.
        stopped = stop(cluster.markers) if cluster.address else 0
        left = reap(cluster.markers, 60, checks.traced_processes(plan.out))
        shutil.rmtree(ray_tmp, ignore_errors=True)
    runner.rows.append(cleanup_row(left, stopped))
    report(plan, runner, time.monotonic() - start, (machine, peak))
    # A failed step stops the run and leaves its FAIL row, so every row ok means every step ran.
    return 0 if all(status == "ok" for _, status, _ in runner.rows) else 1


def _gradient_scale(plan: Plan) -> str:
    """Before any launch: a wrong gradient scale runs without an error, so catch it first."""
    worlds = [plan.real_world_size, plan.world_size]
    return checks.gradient_scale(plan.config(), plan.out / "models/tiny", worlds)


def _plan(experiment: str, out: Path, per_node: int | None, objective: str, gpu: bool) -> Plan:
    if gpu:
        from rlvr.rehearsal.gpu import make_gpu_plan

        return make_gpu_plan(experiment, out, objective)
    return make_plan(experiment, out, per_node, objective)


def _note_pinned(plan: Plan) -> None:
    """Say which of the preset's keys the experiment sets itself (and so keeps)."""
    from rlvr.config.compose import pinned_objective_keys

    pinned = pinned_objective_keys(plan.experiment, plan.objective)
    if pinned:
        print(
            f"rehearse: {plan.experiment} sets {', '.join(pinned)} itself; its values win over "
            f"objective={plan.objective}'s (docs/OBJECTIVES.md)",
            flush=True,
        )


def _parser() -> OneLineParser:
    parser = OneLineParser(prog="rehearse.sh", description=__doc__.splitlines()[0])
    parser.add_argument(
        "experiment", help="a GPU experiment from configs/ (e.g. countdown_qwen3_4b)"
    )
    parser.add_argument(
        "--objective",
        default="grpo",
        help="objective preset from configs/objective/ (default: grpo)",
    )
    parser.add_argument(
        "--out", type=Path, help="work folder (default: artifacts/rehearsal/EXP-OBJECTIVE)"
    )
    parser.add_argument(
        "--gpus_per_node", type=int, help="ranks per node (default: the experiment's own)"
    )
    parser.add_argument("--timeout_s", type=float, default=1200, help="limit per training launch")
    parser.add_argument(
        "--gpu", action="store_true", help="on this GPU node, real stack, small hub model"
    )
    parser.add_argument(
        "--dry_run", action="store_true", help="with --gpu: list the checks, run nothing"
    )
    return parser


def _check(parser: OneLineParser, args: Any) -> None:
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        parser.error("--gpus_per_node must be at least 1")
    if args.gpus_per_node is not None and args.gpu:
        parser.error("--gpu runs the experiment's own GPUs per node: drop --gpus_per_node")
    if args.timeout_s <= 0:
        parser.error("--timeout_s must be positive")
    if args.dry_run and not args.gpu:
        parser.error("--dry_run goes with --gpu")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    # One folder per (experiment, preset): rehearsing another preset never wipes this one.
    suffix = "-gpu" if args.gpu else ""
    default_out = ROOT / "artifacts/rehearsal" / f"{args.experiment}-{args.objective}{suffix}"
    out = (args.out or default_out).resolve()
    try:
        plan = _plan(args.experiment, out, args.gpus_per_node, args.objective, args.gpu)
    except ValueError as exc:
        parser.error(str(exc))
    if args.dry_run:
        from rlvr.rehearsal.gpu import dry_run

        print(dry_run(plan))
        return 0
    if args.gpu:
        from rlvr.rehearsal.gpu import cuda_problem

        if problem := cuda_problem(plan.gpus_per_node):
            parser.error(problem)
    _note_pinned(plan)
    if out.exists() and any(out.iterdir()):
        if not (out / "rehearsal.marker").is_file():
            parser.error(f"--out {out}: not empty and not a rehearsal folder; pick another")
        shutil.rmtree(out)  # a previous rehearsal's own folder
    out.mkdir(parents=True)
    (out / "rehearsal.marker").write_text(args.experiment + "\n")
    try:
        with sigterm_as_interrupt():  # the launch in flight and its Ray are stopped on the way out
            if args.gpu:
                from rlvr.rehearsal.gpu import rehearse_gpu

                return rehearse_gpu(plan, args.timeout_s)
            return rehearse(plan, args.timeout_s)
    except KeyboardInterrupt as exc:
        name = signal.Signals(interrupt_signal(exc)).name
        print(f"rehearse.sh: {name}: stopped the rehearsal and its runs", file=sys.stderr)
        return 128 + interrupt_signal(exc)


if __name__ == "__main__":
    raise SystemExit(main())

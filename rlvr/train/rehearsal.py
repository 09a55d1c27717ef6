"""CPU rehearsal of a GPU experiment at its real world size, through the real launcher.

Usage: python -m rlvr.train.rehearsal EXPERIMENT [--objective NAME] [--out DIR]
          [--gpus_per_node N] [--timeout_s S]
   (or: bash scripts/rehearse.sh EXPERIMENT [--objective NAME] ...)

Runs the experiment's own composed config (batch sizes, group size, mini/micro batches, dynamic
batching, sharding, checkpoint contents, LoRA, nnodes x n_gpus_per_node) through
``scripts/launch_grpo.sh``, verl and Ray on CPU, with fake Ray GPUs and gloo. Replaced, and
nothing else: the model (the tiny random one), the rollout engine (HF generate), dtype (fp32),
attention (SDPA), lengths (short), steps (2, then 3 on resume), data (generated). The
objective preset (configs/objective/, ``--objective``, default grpo) is passed as
``objective=NAME``, exactly as a launch would. A multi-node
experiment runs as that many Ray nodes on this machine, joined by ``scripts/ray_cluster.sh``.
Checks that results are right, not only that it ran: before any launch, verl's own actor update
under the experiment's batching against a gradient computed outside verl ("gradient scale");
for a multi-node experiment, step 1 on its own nodes against one node of the same world size
("topology"). Exit 0 when every check holds; otherwise the step that failed and why, exit 1.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlvr import tasks
from rlvr.common.cli import OneLineParser
from rlvr.common.paths import ROOT
from rlvr.common.processes import RAY_CLI, Finished, reap, run_bounded, stop
from rlvr.tasks import TaskSpec
from rlvr.train import rehearsal_checks as checks
from rlvr.train.checkpoint_budget import lora_rank

RESPONSE_LENGTH = 16
VAL_ROWS = 16


@dataclass
class Plan:
    """The experiment as composed, and what the rehearsal replaces in it."""

    experiment: str
    out: Path
    nnodes: int
    gpus_per_node: int
    train_batch: int
    task: str
    lora: bool
    save_contents: list[str]
    real_world_size: int  # the GPU run's, whatever the rehearsal runs at
    objective: str = "grpo"
    overrides: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def actor_dir(self) -> Path:
        return self.out / f"checkpoints/{self.experiment}/global_step_2/actor"


def make_plan(
    experiment: str, out: Path, gpus_per_node: int | None, objective: str = "grpo"
) -> Plan:
    from rlvr.train.config import compose, experiments, objectives

    if experiment not in experiments():
        raise ValueError(f"unknown experiment {experiment!r}; one of {experiments()}")
    if objective not in objectives():
        raise ValueError(f"unknown objective {objective!r}; one of {objectives()}")
    config = compose(experiment, [f"objective={objective}"])
    if config.actor_rollout_ref.rollout.name == "hf":
        raise ValueError(f"{experiment} already runs on CPU: use scripts/launch_grpo.sh")
    real = int(config.trainer.n_gpus_per_node)
    nnodes, batch = int(config.trainer.nnodes), int(config.data.train_batch_size)
    per_node = gpus_per_node or ranks_that_fit(real, nnodes, batch)
    plan = Plan(
        experiment=experiment,
        out=out,
        nnodes=nnodes,
        gpus_per_node=per_node,
        train_batch=batch,
        task=_task_of(config).name,
        lora=lora_rank(config) > 0,
        save_contents=list(config.actor_rollout_ref.actor.checkpoint.save_contents),
        real_world_size=nnodes * real,
        objective=objective,
    )
    plan.overrides = [
        "+rehearsal=cpu",
        f"objective={objective}",
        f"paths.data={out}/data",
        f"paths.checkpoints={out}/checkpoints",
        f"actor_rollout_ref.model.path={out}/models/tiny",
        f"data.max_response_length={RESPONSE_LENGTH}",
        "trainer.save_freq=2",
        "trainer.test_freq=2",
    ]
    if per_node != config.trainer.n_gpus_per_node:
        # Fewer ranks per node than the real node: keep hybrid sharding within a node.
        plan.overrides += [
            f"trainer.n_gpus_per_node={per_node}",
            *(
                f"actor_rollout_ref.{role}.fsdp_config.fsdp_size={per_node}"
                for role in ("actor", "ref")
                if config.actor_rollout_ref[role].fsdp_config.fsdp_size > 0
            ),
        ]
    return plan


# Measured here: a rehearsal's machine memory grows by about 1.1 GiB per rank, plus Ray's own
# daemons (two nodes: two raylets and the dashboard). Rounded up for a margin.
GIB_PER_RANK, GIB_BASE = 1.25, 4.0


def ranks_that_fit(real: int, nnodes: int, batch: int) -> int:
    """Ranks per node: the experiment's own count when it fits in available memory, else the
    largest smaller count that fits and still divides the batch across all ranks."""
    import psutil

    available = psutil.virtual_memory().available / 2**30
    for per_node in range(real, 0, -1):
        fits = GIB_BASE + GIB_PER_RANK * nnodes * per_node <= available
        if (fits and batch % (nnodes * per_node) == 0) or per_node == 1:
            if per_node < real:
                need = GIB_BASE + GIB_PER_RANK * nnodes * real
                print(
                    f"rehearse: {nnodes} x {real} ranks need ~{need:.0f} GiB, {available:.0f} GiB"
                    f" available: rehearsing {nnodes} x {per_node} (--gpus_per_node to choose)",
                    flush=True,
                )
            return per_node
    return 1


def _task_of(config: Any) -> TaskSpec:
    spec = tasks.for_config(config)
    if spec is None:
        raise ValueError(
            f"{config.custom_reward_function.path}: the reward of no registered task "
            f"({tasks.names()}); the rehearsal generates data through the task's spec"
        )
    return spec


def prepare_inputs(plan: Plan) -> str:
    """The tiny model and offline data, enough rows for 3 steps of the real batch size."""
    from rlvr.models.tiny import build_model

    build_model(plan.out / "models/tiny")
    rows = plan.train_batch * 3
    tasks.get(plan.task).offline_data(plan.out / "data" / plan.task, rows, VAL_ROWS)
    return f"tiny model, {rows} generated {plan.task} training rows, {VAL_ROWS} for validation"


@dataclass
class Cluster:
    """Ray nodes started for this rehearsal (all on this machine), stopped by marker."""

    address: str | None
    markers: list[str]
    summary: str = ""


def start_ray(plan: Plan, ray_tmp: str) -> Cluster:
    """One node: verl's own local Ray (fake GPUs through ray_init). Several: ray_cluster.sh."""
    if plan.nnodes == 1:
        plan.overrides += [
            f"+ray_kwargs.ray_init.num_gpus={plan.gpus_per_node}",
            f"ray_kwargs.ray_init.num_cpus={2 * plan.gpus_per_node}",
            f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
        ]
        where = f"verl's local Ray, {plan.gpus_per_node} fake GPUs"
        return Cluster(None, [ray_tmp], where)
    port = _free_port()
    address = f"127.0.0.1:{port}"
    where = f"{plan.nnodes} Ray nodes x {plan.gpus_per_node} fake GPUs at {address}"
    cluster = Cluster(address, [ray_tmp, f":{port}"], where)
    node = ["--num-gpus", str(plan.gpus_per_node), "--num-cpus", str(2 * plan.gpus_per_node)]
    node += ["--node-ip-address", "127.0.0.1"]
    dashboard = f"http://127.0.0.1:{_free_port()}"
    head = ["--temp-dir", ray_tmp, "--dashboard-port", dashboard.rsplit(":", 1)[1]]
    head += ["--ray-client-server-port", str(_free_port())]
    commands = [["head", "--port", str(port), *head, *node]]
    commands += [["worker", address, *node] for _ in range(plan.nnodes - 1)]
    for i, command in enumerate(commands):
        script = ["bash", str(ROOT / "scripts/ray_cluster.sh"), *command]
        log = plan.out / f"ray_cluster_{i}_{command[0]}.log"
        done = run_bounded(script, _env(plan), 180, ROOT, log)
        if done.returncode != 0:
            raise checks.RehearsalFailure(f"ray_cluster.sh {command[0]}: {done.output[-800:]}")
    # Sweeps submit jobs to the head's job server: it must answer.
    jobs = run_bounded([RAY_CLI, "job", "list", "--address", dashboard], _env(plan), 120, ROOT)
    if jobs.returncode != 0:
        raise checks.RehearsalFailure(f"the head's job server at {dashboard} does not answer")
    cluster.summary += f"; job server at {dashboard}"
    return cluster


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(plan: Plan, trace: Path | None = None, address: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "RAY_ADDRESS")}
    env |= {"RLVR_LOG_DIR": str(plan.out / "logs"), "WANDB_MODE": "offline"}
    env |= {"HF_HUB_OFFLINE": "1", "RAY_DEDUP_LOGS": "0"}
    if trace is not None:
        trace.mkdir(parents=True, exist_ok=True)
        env["RLVR_TRACE_DIR"] = str(trace)
    if address is not None:
        env["RAY_ADDRESS"] = address
    return env


# What a topology run sets itself (a later duplicate of a Hydra override is an error).
_TOPOLOGY_KEYS = (
    "paths.checkpoints=",
    "trainer.n_gpus_per_node=",
    "actor_rollout_ref.actor.fsdp_config.fsdp_size=",
    "actor_rollout_ref.ref.fsdp_config.fsdp_size=",
)


def step_one(plan: Plan, name: str, one_node: bool) -> Plan:
    """Step 1 of the experiment in ``out/name`` (its own checkpoints, logs and wandb), scored by
    the rehearsal's stand-in reward so that step 1 has a gradient: on the experiment's own
    topology, or on one node of the same world size with plain FSDP over every rank. Same data,
    seed and world size: the two must agree (``checks.same_step_one``)."""
    run = replace(plan, out=plan.out / name)
    extra = [
        f"paths.checkpoints={run.out}/checkpoints",
        "trainer.save_freq=-1",
        f"custom_reward_function.path={ROOT}/rlvr/train/rehearsal_reward.py",
    ]
    drop: tuple[str, ...] = ("paths.checkpoints=",)
    if one_node:
        run = replace(run, nnodes=1, gpus_per_node=plan.world_size)
        extra += ["trainer.nnodes=1", f"trainer.n_gpus_per_node={plan.world_size}"]
        extra += [f"actor_rollout_ref.{r}.fsdp_config.fsdp_size=-1" for r in ("actor", "ref")]
        drop = _TOPOLOGY_KEYS
    run.overrides = [o for o in plan.overrides if not o.startswith(drop)] + extra
    run.out.mkdir(parents=True, exist_ok=True)
    return run


def one_node_step_one(plan: Plan, timeout_s: float) -> Finished:
    """Before the cluster starts (verl's local Ray would find and join a running one)."""
    run = step_one(plan, "one_node", one_node=True)
    ray_tmp = tempfile.mkdtemp(prefix="rlvr-ref-", dir="/tmp")
    try:
        done = launch(run, start_ray(run, ray_tmp), 1, "train", timeout_s)
    finally:
        left = reap([ray_tmp], 60, checks.traced_processes(run.out))
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if left:
        raise checks.RehearsalFailure(f"the one-node run left Ray processes {left}")
    return done


def topology(plan: Plan, cluster: Cluster, timeout_s: float) -> str:
    """Step 1 on the experiment's cluster, compared with the one-node run's."""
    launch(step_one(plan, "cluster", one_node=False), cluster, 1, "train", timeout_s)
    metrics = f"checkpoints/{plan.experiment}/metrics.jsonl"
    return checks.same_step_one(plan.out / "cluster" / metrics, plan.out / "one_node" / metrics)


def launch(plan: Plan, cluster: Cluster, steps: int, name: str, timeout_s: float) -> Finished:
    """``scripts/launch_grpo.sh`` with the experiment plus the rehearsal's replacements."""
    cmd = [
        "bash",
        str(ROOT / "scripts/launch_grpo.sh"),
        plan.experiment,
        *plan.overrides,
        f"trainer.total_training_steps={steps}",
    ]
    env = _env(plan, plan.out / f"trace_{name}", cluster.address)
    done = run_bounded(cmd, env, timeout_s, ROOT, plan.out / f"{name}.log", markers=cluster.markers)
    if done.returncode != 0:
        tail = "\n".join(done.output.splitlines()[-25:])
        raise checks.RehearsalFailure(f"exit {done.returncode} after {done.seconds:.0f} s:\n{tail}")
    return done


class Runner:
    """Runs named steps in order; the first failure stops the rehearsal and names the step."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str]] = []

    def step(self, name: str, action: Callable[[], Any]) -> Any:
        start = time.monotonic()
        print(f"== {name} ...", flush=True)
        try:
            result = action()
        except Exception as exc:  # a check that crashes still names its step
            if not isinstance(exc, checks.RehearsalFailure):
                exc = checks.RehearsalFailure(f"{type(exc).__name__}: {exc}")
            self.rows.append((name, "FAIL", str(exc).splitlines()[0]))
            print(f"FAILED at step '{name}': {exc}", file=sys.stderr, flush=True)
            raise exc from None
        detail = result if isinstance(result, str) else getattr(result, "summary", "")
        self.rows.append((name, "ok", f"{detail} ({time.monotonic() - start:.0f} s)"))
        print(f"   ok: {self.rows[-1][2]}", flush=True)
        return result


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
            name = f"one node x {plan.world_size}, step 1"
            runner.step(name, lambda: one_node_step_one(plan, timeout_s))
        cluster = runner.step("ray", lambda: start_ray(plan, ray_tmp))
        if plan.nnodes > 1:
            runner.step("topology", lambda: topology(plan, cluster, timeout_s))
        train = runner.step("train 2 steps", lambda: launch(plan, cluster, 2, "train", timeout_s))
        peak, machine = train.peak_bytes, train.peak_machine_bytes
        world, actor = plan.world_size, plan.actor_dir
        runner.step("devices", lambda: checks.devices(plan.out / "trace_train", world, python))
        runner.step("shards", lambda: checks.shards(actor, world, plan.save_contents))
        lora_dir = actor / "lora_adapter" if plan.lora else None
        runner.step("huggingface", lambda: checks.loads_strictly(actor / "huggingface", lora_dir))
        wandb_dir = plan.out / "logs/wandb"
        runner.step("wandb", lambda: checks.wandb_run(wandb_dir, set(), [1, 2]))
        known = set(wandb_dir.glob("offline-run-*/run-*.wandb"))
        resume = runner.step("resume", lambda: launch(plan, cluster, 3, "resume", timeout_s))
        peak, machine = max(peak, resume.peak_bytes), max(machine, resume.peak_machine_bytes)
        runner.step("resumed", lambda: _resumed(plan, known))
    except checks.RehearsalFailure:
        pass
    finally:
        # Our own cluster is ours to stop; everything else must have exited by itself.
        stopped = stop(cluster.markers) if cluster.address else 0
        left = reap(cluster.markers, 60, checks.traced_processes(plan.out))
        shutil.rmtree(ray_tmp, ignore_errors=True)
    runner.rows.append(_cleanup_row(left, stopped))
    _report(plan, runner, time.monotonic() - start, (machine, peak))
    # A failed step stops the run and leaves its FAIL row, so every row ok means every step ran.
    return 0 if all(status == "ok" for _, status, _ in runner.rows) else 1


def _cleanup_row(left: list[int], stopped: int) -> tuple[str, str, str]:
    detail = f"Ray processes left: {len(left)}" + (f" (killed: {left})" if left else "")
    if stopped:
        detail += f"; stopped this rehearsal's cluster ({stopped} daemons)"
    return ("cleanup", "FAIL" if left else "ok", detail)


def _gradient_scale(plan: Plan) -> str:
    """Before any launch: a wrong gradient scale runs without an error, so catch it first."""
    from rlvr.train.config import compose

    config = compose(plan.experiment, plan.overrides)
    worlds = [plan.real_world_size, plan.world_size]
    return checks.gradient_scale(config, plan.out / "models/tiny", worlds)


def _resumed(plan: Plan, known: set[Path]) -> str:
    log = (plan.out / "resume.log").read_text()
    if "global_step_2" not in log or "Load from checkpoint folder" not in log:
        raise checks.RehearsalFailure("the relaunch did not load global_step_2")
    return "from global_step_2; " + checks.wandb_run(plan.out / "logs/wandb", known, [3])


def _report(plan: Plan, runner: Runner, seconds: float, peaks: tuple[int, int]) -> None:
    print(
        f"\nRehearsal of {plan.experiment} (objective={plan.objective}): "
        f"{plan.nnodes} node(s) x {plan.gpus_per_node} ranks"
    )
    for name, status, detail in runner.rows:
        print(f"  {status:4}  {name:12} {detail}")
    machine, summed = (value / 2**30 for value in peaks)
    print(
        f"wall {seconds:.0f} s; peak memory: machine +{machine:.1f} GiB in use "
        f"(summed RSS {summed:.1f} GiB); out: {plan.out}"
    )


def _note_pinned(plan: Plan) -> None:
    """Say which of the preset's keys the experiment sets itself (and so keeps)."""
    from rlvr.train.config import pinned_objective_keys

    pinned = pinned_objective_keys(plan.experiment, plan.objective)
    if pinned:
        print(
            f"rehearse: {plan.experiment} sets {', '.join(pinned)} itself; its values win over "
            f"objective={plan.objective}'s (docs/OBJECTIVES.md)",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        parser.error("--gpus_per_node must be at least 1")
    if args.timeout_s <= 0:
        parser.error("--timeout_s must be positive")
    # One folder per (experiment, preset): rehearsing another preset never wipes this one.
    default_out = ROOT / "artifacts/rehearsal" / f"{args.experiment}-{args.objective}"
    out = (args.out or default_out).resolve()
    try:
        plan = make_plan(args.experiment, out, args.gpus_per_node, args.objective)
    except ValueError as exc:
        parser.error(str(exc))
    _note_pinned(plan)
    if out.exists() and any(out.iterdir()):
        if not (out / "rehearsal.marker").is_file():
            parser.error(f"--out {out}: not empty and not a rehearsal folder; pick another")
        shutil.rmtree(out)  # a previous rehearsal's own folder
    out.mkdir(parents=True)
    (out / "rehearsal.marker").write_text(args.experiment + "\n")
    return rehearse(plan, args.timeout_s)


if __name__ == "__main__":
    raise SystemExit(main())

"""How a CPU rehearsal starts Ray and launches the experiment, and its topology runs."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from rlvr.common.paths import ROOT
from rlvr.common.processes import RAY_CLI, Finished, reap, run_bounded
from rlvr.rehearsal import checks
from rlvr.rehearsal.plan import Plan


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
    if plan.gpu:  # the ranks use the GPUs Ray gives them; a cluster is the caller's own
        if address is not None:
            env["RAY_ADDRESS"] = address
        return env
    # CPU only, also on a GPU node: every Ray worker blanks the fake GPU id Ray gives it once the
    # trace has it (rlvr.cpu.hook), as on a GPU node those ids name real GPUs. Ray must
    # not see CUDA_VISIBLE_DEVICES itself: it refuses fake GPUs beyond the ids listed there.
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["RLVR_HIDE_GPUS"] = "1"
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


def scored_by_stand_in(plan: Plan) -> Plan:
    """A multi-node plan whose runs score by the rehearsal's stand-in reward, so that step 1 has a
    gradient (the tiny model never earns the task's reward): its 2-step run on the cluster is the
    topology check's run too, compared with one node's step 1 (``one_node_step_one``)."""
    reward = f"custom_reward_function.path={ROOT}/rlvr/rehearsal/reward.py"
    return replace(plan, overrides=[*plan.overrides, reward])


def one_node_step_one(plan: Plan, timeout_s: float) -> Finished:
    """Step 1 of ``plan`` in ``out/one_node`` (its own checkpoints, logs and wandb) on one node of
    the same world size with plain FSDP over every rank: same data, seed, reward and world size
    as the plan's own run, which must agree with it (``topology``). Runs before the cluster
    starts (verl's local Ray would find and join a running one)."""
    run = _one_node(plan)
    run.out.mkdir(parents=True, exist_ok=True)
    ray_tmp = tempfile.mkdtemp(prefix="rlvr-ref-", dir="/tmp")
    try:
        done = launch(run, start_ray(run, ray_tmp), 1, "train", timeout_s)
    finally:
        left = reap([ray_tmp], 60, checks.traced_processes(run.out))
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if left:
        raise checks.RehearsalFailure(f"the one-node run left Ray processes {left}")
    return done


def topology(plan: Plan, metrics: Path) -> str:
    """Step 1 of the plan's run on its cluster (``metrics``, its metrics.jsonl) against the
    one-node run's (where that run's own config logs them)."""
    reference = Path(_one_node(plan).config().paths.metrics)
    return checks.same_step_one(metrics, reference)


def _one_node(plan: Plan) -> Plan:
    """``plan`` on one node of the same world size, plain FSDP over every rank, in out/one_node."""
    run = replace(plan, out=plan.out / "one_node", nnodes=1, gpus_per_node=plan.world_size)
    run.overrides = [o for o in plan.overrides if not o.startswith(_TOPOLOGY_KEYS)]
    run.overrides += [
        f"paths.checkpoints={run.out}/checkpoints",
        "trainer.save_freq=-1",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={plan.world_size}",
        *(f"actor_rollout_ref.{role}.fsdp_config.fsdp_size=-1" for role in ("actor", "ref")),
    ]
    return run


def launch(plan: Plan, cluster: Cluster, steps: int, name: str, timeout_s: float) -> Finished:
    """``scripts/train.sh`` with the experiment plus the rehearsal's replacements."""
    cmd = [
        "bash",
        str(ROOT / "scripts/train.sh"),
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

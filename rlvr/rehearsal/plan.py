"""What a CPU rehearsal runs: the GPU experiment as composed, and what it replaces in it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr import tasks
from rlvr.planning.checkpoint_budget import lora_rank
from rlvr.tasks import TaskSpec

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
    gpu: bool = False  # the GPU rehearsal (rlvr/rehearsal/gpu.py): real GPUs, no CPU swaps

    @property
    def world_size(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def actor_dir(self) -> Path:
        return self.out / f"checkpoints/{self.experiment}/global_step_2/actor"

    def config(self) -> Any:
        """The config this plan's launches compose (``compose`` caches it)."""
        from rlvr.config.compose import compose

        return compose(self.experiment, self.overrides)


def make_plan(
    experiment: str, out: Path, gpus_per_node: int | None, objective: str = "grpo"
) -> Plan:
    from rlvr.config.compose import compose, experiments, objectives

    if experiment not in experiments():
        raise ValueError(f"unknown experiment {experiment!r}; one of {experiments()}")
    if objective not in objectives():
        raise ValueError(f"unknown objective {objective!r}; one of {objectives()}")
    config = compose(experiment, [f"objective={objective}"])
    if config.actor_rollout_ref.rollout.name == "hf":
        raise ValueError(f"{experiment} already runs on CPU: use scripts/train.sh")
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

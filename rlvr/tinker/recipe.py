"""A Tinker experiment's settings, read once from its composed config (the one source of truth).

The keys are verl's own (``actor_rollout_ref.model.lora_rank``, ``...actor.optim.lr``,
``...rollout.n``...), so a Tinker experiment reads like the verl ones, the sweep's
short grid names set the same knobs, and the run report finds the model and task where it looks
for them. ``tinker:`` holds what verl has no key for (the loss, the overlap, request mechanics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rlvr.common.groups import DROP_CONSTANT

#: The block of a composed config that makes it a Tinker experiment (configs/hardware/tinker.yaml).
TINKER_KEY = "tinker"
#: The losses whose inputs rlvr.tinker.datums builds (Tinker docs, "Loss functions").
LOSSES = ("importance_sampling",)
ADVANTAGES = ("grpo", DROP_CONSTANT)


def is_tinker(config: Any) -> bool:
    """Whether a composed config trains through the Tinker API."""
    return OmegaConf.select(config, TINKER_KEY) is not None


@dataclass(frozen=True)
class TinkerRecipe:
    experiment: str
    model: str
    lora_rank: int
    learning_rate: float
    group_size: int
    batch_prompts: int
    max_prompt_tokens: int
    max_tokens: int
    temperature: float
    loss_fn: str
    sample_ahead: bool
    steps: int
    save_freq: int  # <= 0: save only at the end
    test_freq: int  # <= 0: no validation during training
    val_before_train: bool
    val_max_samples: int  # -1: every held-out prompt
    val_temperature: float
    norm_by_std: bool
    drop_constant: bool
    seed: int
    train_files: str
    val_files: str
    template_kwargs: dict[str, Any]
    reward_path: str
    reward_name: str
    reward_kwargs: dict[str, Any]
    task: str | None
    run_dir: Path
    metrics_path: Path
    rollouts_dir: Path
    request_timeout_s: float
    max_retries: int
    backoff_s: float

    @classmethod
    def from_config(cls, config: Any) -> TinkerRecipe:
        resolved = OmegaConf.to_container(config, resolve=True)
        assert isinstance(resolved, dict)
        actor, rollout = (
            resolved["actor_rollout_ref"]["actor"],
            resolved["actor_rollout_ref"]["rollout"],
        )
        data, trainer, tinker = resolved["data"], resolved["trainer"], resolved[TINKER_KEY]
        reward = resolved["custom_reward_function"]
        return cls(
            experiment=str(trainer["experiment_name"]),
            model=str(resolved["actor_rollout_ref"]["model"]["path"]),
            lora_rank=resolved["actor_rollout_ref"]["model"].get("lora_rank") or 0,
            learning_rate=actor["optim"]["lr"],
            group_size=rollout["n"],
            batch_prompts=data["train_batch_size"],
            max_prompt_tokens=data["max_prompt_length"],
            max_tokens=data["max_response_length"],
            temperature=rollout["temperature"],
            loss_fn=str(tinker.get("loss_fn", "importance_sampling")),
            sample_ahead=bool(tinker.get("sample_ahead", False)),
            steps=trainer["total_training_steps"] or 0,
            save_freq=int(trainer.get("save_freq") or -1),
            test_freq=int(trainer.get("test_freq") or -1),
            val_before_train=bool(trainer.get("val_before_train", True)),
            val_max_samples=int(data.get("val_max_samples") or -1),
            val_temperature=float(rollout["val_kwargs"]["temperature"]),
            norm_by_std=bool(resolved["algorithm"].get("norm_adv_by_std_in_grpo", True)),
            drop_constant=resolved["algorithm"]["adv_estimator"] == DROP_CONSTANT,
            seed=int(data.get("seed") or 1),
            train_files=str(data["train_files"]),
            val_files=str(data["val_files"]),
            template_kwargs=dict(data.get("apply_chat_template_kwargs") or {}),
            reward_path=str(reward["path"]),
            reward_name=str(reward.get("name") or "compute_score"),
            reward_kwargs=dict(reward.get("reward_kwargs") or {}),
            task=(resolved.get("recipe") or {}).get("task"),
            run_dir=Path(trainer["default_local_dir"]),
            metrics_path=Path(resolved["paths"]["metrics"]),
            rollouts_dir=Path(resolved["paths"]["rollouts"]),
            request_timeout_s=float(tinker.get("request_timeout_s", 600)),
            max_retries=int(tinker.get("max_retries", 4)),
            backoff_s=float(tinker.get("backoff_s", 2.0)),
        )


def recipe_problems(config: Any) -> list[str]:
    """What a Tinker run cannot train with, one line each, before anything connects."""
    problems: list[str] = []
    select = lambda key: OmegaConf.select(config, key)  # noqa: E731
    counts = {
        "actor_rollout_ref.model.lora_rank": select("actor_rollout_ref.model.lora_rank"),
        "actor_rollout_ref.rollout.n": select("actor_rollout_ref.rollout.n"),
        "data.train_batch_size": select("data.train_batch_size"),
        "data.max_response_length": select("data.max_response_length"),
        "trainer.total_training_steps": select("trainer.total_training_steps"),
    }
    for key, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            why = " (Tinker trains LoRA adapters only)" if key.endswith("lora_rank") else ""
            problems.append(f"{key}={value}: must be a whole number >= 1{why}")
    n = counts["actor_rollout_ref.rollout.n"]
    if isinstance(n, int) and n == 1:
        problems.append("actor_rollout_ref.rollout.n=1: a group of one has no spread; set n >= 2")
    lr = select("actor_rollout_ref.actor.optim.lr")
    if (
        isinstance(lr, bool)
        or not isinstance(lr, int | float)
        or not (math.isfinite(lr) and lr > 0)
    ):
        problems.append(f"actor_rollout_ref.actor.optim.lr={lr}: must be a finite number > 0")
    loss = select(f"{TINKER_KEY}.loss_fn")
    if loss not in LOSSES:
        problems.append(f"{TINKER_KEY}.loss_fn={loss}: the Tinker loop builds {', '.join(LOSSES)}")
    estimator = select("algorithm.adv_estimator")
    if estimator not in ADVANTAGES:
        problems.append(
            f"algorithm.adv_estimator={estimator}: the Tinker loop computes {', '.join(ADVANTAGES)}"
        )
    return problems

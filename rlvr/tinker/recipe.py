"""A Tinker experiment's settings, read once from its composed config (the one source of truth):
typed and checked in the same pass, so pre-flight and the run read the same values and a bad
one is refused in one line naming its key, before anything connects.

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
from rlvr.common.messages import first_line

#: The block of a composed config that makes it a Tinker experiment (configs/hardware/tinker.yaml).
TINKER_KEY = "tinker"
#: The losses whose inputs rlvr.tinker.datums builds (Tinker docs, "Loss functions").
LOSSES = ("importance_sampling",)
ADVANTAGES = ("grpo", DROP_CONSTANT)
_UNSET = object()


def is_tinker(config: Any) -> bool:
    """Whether a composed config trains through the Tinker API."""
    return OmegaConf.select(config, TINKER_KEY) is not None


class RecipeError(ValueError):
    """The settings a Tinker run cannot train with, one line each (``problems``)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class _Keys:
    """Typed reads of a resolved config's dotted keys; each bad value is recorded as one line
    naming the key, and read as a harmless stand-in so that every problem is found in one pass."""

    def __init__(self, resolved: dict[str, Any]) -> None:
        self.resolved = resolved
        self.problems: list[str] = []

    def raw(self, key: str, default: Any = _UNSET) -> Any:
        node: Any = self.resolved
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                if default is _UNSET:
                    self.problems.append(f"{key}: missing")
                return None if default is _UNSET else default
            node = node[part]
        return default if node is None and default is not _UNSET else node

    def _refuse(self, key: str, value: Any, need: str) -> None:
        self.problems.append(f"{key}={value}: {need}")

    def count(self, key: str, why: str = "") -> int:
        """A whole number >= 1 (a size, a length, a step count)."""
        value = self.raw(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self._refuse(key, value, f"must be a whole number >= 1{why}")
            return 1
        return value

    def whole(self, key: str, default: int, least: int | None = None) -> int:
        """A whole number (``default`` when unset), at least ``least``."""
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self._refuse(key, value, "must be a whole number")
            return default
        if least is not None and value < least:
            self._refuse(key, value, f"must be a whole number >= {least}")
            return default
        return value

    def number(self, key: str, default: Any = _UNSET, positive: bool = True) -> float:
        """A finite number, > 0 (``positive``) or >= 0."""
        value = self.raw(key, default)
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not (ok and math.isfinite(value) and (value > 0 if positive else value >= 0)):
            self._refuse(key, value, f"must be a finite number {'>' if positive else '>='} 0")
            return 1.0
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            self._refuse(key, value, "must be true or false")
            return default
        return value

    def text(self, key: str, default: Any = _UNSET) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str) or not value:
            self._refuse(key, value, "must be a non-empty string")
            return ""
        return value

    def choice(self, key: str, allowed: tuple[str, ...], what: str) -> str:
        value = self.raw(key, None)
        if value not in allowed:
            self._refuse(key, value, f"the Tinker loop {what} {', '.join(allowed)}")
            return allowed[0]
        return str(value)

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.raw(key, {})
        if not isinstance(value, dict):
            self._refuse(key, value, "must be a mapping")
            return {}
        return dict(value)

    def names(self, key: str) -> tuple[str, ...]:
        value = self.raw(key, [])
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self._refuse(key, value, "must be a list of names")
            return ()
        return tuple(value)


@dataclass(frozen=True)
class TinkerRecipe:
    experiment: str
    project: str  # trainer.project_name: the WandB project, as for verl runs
    loggers: tuple[str, ...]  # trainer.logger, handed to verl's Tracking
    val_generations: int  # trainer.log_val_generations: the WandB table's rows per validation
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
    #: The whole composed config, resolved: what the WandB run records as its config (verl's).
    resolved: dict[str, Any]

    @classmethod
    def from_config(cls, config: Any) -> TinkerRecipe:
        """The recipe of a composed config; RecipeError lists every value it cannot train with."""
        try:
            container = OmegaConf.to_container(config, resolve=True)
        except Exception as exc:  # an interpolation that does not resolve, a missing ???
            raise RecipeError([f"config: {first_line(exc)}"]) from None
        assert isinstance(container, dict)
        resolved = {str(key): value for key, value in container.items()}
        keys = _Keys(resolved)
        recipe = cls(**_run_fields(keys), **_train_fields(keys), **_io_fields(keys),
                     resolved=resolved)  # fmt: skip
        if keys.problems:
            raise RecipeError(keys.problems)
        return recipe


def _run_fields(keys: _Keys) -> dict[str, Any]:
    """Naming, length, checkpoints, validation and logging (``trainer.*``)."""
    return {
        "experiment": keys.text("trainer.experiment_name"),
        "project": keys.text("trainer.project_name"),
        "loggers": keys.names("trainer.logger"),
        "val_generations": keys.whole("trainer.log_val_generations", 0, least=0),
        "steps": keys.count("trainer.total_training_steps"),
        "save_freq": keys.whole("trainer.save_freq", -1),
        "test_freq": keys.whole("trainer.test_freq", -1),
        "val_before_train": keys.flag("trainer.val_before_train", True),
        "run_dir": Path(keys.text("trainer.default_local_dir")),
    }


def _train_fields(keys: _Keys) -> dict[str, Any]:
    """The model, the adapter and the GRPO knobs (verl's keys), and ``tinker.*``."""
    rollout, tinker = "actor_rollout_ref.rollout", TINKER_KEY
    group_size = keys.count(f"{rollout}.n")
    if group_size == 1:
        keys.problems.append(f"{rollout}.n=1: a group of one has no spread; set n >= 2")
    estimator = keys.choice("algorithm.adv_estimator", ADVANTAGES, "computes")
    return {
        "model": keys.text("actor_rollout_ref.model.path"),
        "lora_rank": keys.count(
            "actor_rollout_ref.model.lora_rank", " (Tinker trains LoRA adapters only)"
        ),
        "learning_rate": keys.number("actor_rollout_ref.actor.optim.lr"),
        "group_size": group_size,
        "batch_prompts": keys.count("data.train_batch_size"),
        "max_prompt_tokens": keys.count("data.max_prompt_length"),
        "max_tokens": keys.count("data.max_response_length"),
        "temperature": keys.number(f"{rollout}.temperature", positive=False),
        "val_temperature": keys.number(f"{rollout}.val_kwargs.temperature", positive=False),
        "norm_by_std": keys.flag("algorithm.norm_adv_by_std_in_grpo", True),
        "drop_constant": estimator == DROP_CONSTANT,
        "loss_fn": keys.choice(f"{tinker}.loss_fn", LOSSES, "builds"),
        "sample_ahead": keys.flag(f"{tinker}.sample_ahead", False),
        "request_timeout_s": keys.number(f"{tinker}.request_timeout_s", 600),
        "max_retries": keys.whole(f"{tinker}.max_retries", 4, least=0),
        "backoff_s": keys.number(f"{tinker}.backoff_s", 2.0, positive=False),
    }


def _io_fields(keys: _Keys) -> dict[str, Any]:
    """The data, the reward and the run folder's files."""
    return {
        "seed": keys.whole("data.seed", 1),
        "val_max_samples": keys.whole("data.val_max_samples", -1),
        "train_files": keys.text("data.train_files"),
        "val_files": keys.text("data.val_files"),
        "template_kwargs": keys.mapping("data.apply_chat_template_kwargs"),
        "reward_path": keys.text("custom_reward_function.path"),
        "reward_name": keys.text("custom_reward_function.name", "compute_score"),
        "reward_kwargs": keys.mapping("custom_reward_function.reward_kwargs"),
        "task": keys.raw("recipe.task", None),
        "metrics_path": Path(keys.text("paths.metrics")),
        "rollouts_dir": Path(keys.text("paths.rollouts")),
    }

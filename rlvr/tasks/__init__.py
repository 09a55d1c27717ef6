"""The task registry: every task the recipes know, by name.

A task is a reward file under ``rewards/``, a module here exporting ``SPEC`` (a
:class:`TaskSpec`), an overlay ``configs/task/<name>.yaml`` that names it (``recipe.task``) and
one line in ``SPECS`` below, the only place that lists the tasks (docs/ADDING_A_TASK.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlvr.common.paths import ROOT
from rlvr.tasks import countdown, gsm8k
from rlvr.tasks.spec import TaskError, TaskSpec

# The registry: one line per task.
SPECS: tuple[TaskSpec, ...] = (
    countdown.SPEC,
    gsm8k.SPEC,
)

#: The config key naming a run's task; each overlay configs/task/<name>.yaml sets it.
TASK_KEY = "recipe.task"


def _by_name(specs: Iterable[TaskSpec]) -> dict[str, TaskSpec]:
    found: dict[str, TaskSpec] = {}
    for spec in specs:
        if spec.name in found:
            raise TaskError(f"task {spec.name!r} is registered twice in rlvr/tasks/__init__.py")
        found[spec.name] = spec
    return found


_REGISTRY = _by_name(SPECS)


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> TaskSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise TaskError(
            f"unknown task {name!r}; the tasks are {names()} (a new task needs its SPEC in "
            "rlvr/tasks/__init__.py's SPECS)"
        ) from None


def all_specs() -> list[TaskSpec]:
    return [_REGISTRY[name] for name in names()]


def grades_with_own_reward(spec: TaskSpec, reward_path: str | Path) -> bool:
    """Whether ``reward_path`` is the task's own reward file, also in a config composed with
    another ``paths.root`` (a copy of the repository, a sweep's folder): same path under root."""
    wanted = Path(reward_path).resolve()
    if spec.reward_file.resolve() == wanted:
        return True
    if not spec.reward_file.is_relative_to(ROOT):
        return False
    tail = spec.reward_file.relative_to(ROOT).parts
    return wanted.parts[-len(tail) :] == tail


def for_config(config: Any) -> TaskSpec | None:
    """The task a composed config names in ``recipe.task`` (set by its task overlay).

    None for a config with no task key (composed without a task overlay) or whose reward was
    swapped for a file that is not the task's own (a test's or user's reward): no registered
    reward grades that run, so nothing task-specific (kwargs, hacking patterns) applies to it.
    A present but unknown or empty name raises TaskError (one line).
    """
    recipe = config.get("recipe") if hasattr(config, "get") else None
    if recipe is None or "task" not in recipe:
        return None
    name = recipe.get("task")
    if not name:
        raise TaskError(f"{TASK_KEY} is empty; name a task, one of {names()}")
    spec = get(str(name))
    reward = config.get("custom_reward_function") or {}
    if not reward.get("path") or not grades_with_own_reward(spec, str(reward["path"])):
        return None
    return spec


__all__ = ["SPECS", "TaskError", "TaskSpec", "all_specs", "for_config", "get", "names"]

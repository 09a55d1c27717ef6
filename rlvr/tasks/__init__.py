"""The task registry: every task the recipes know, by name.

A task is one module here exporting ``SPEC`` (a :class:`TaskSpec`), a reward file under
``rewards/``, an overlay ``configs/task/<name>.yaml`` and an experiment; the line below is the
only place that lists the tasks (docs/ADDING_A_TASK.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.common.paths import ROOT
from rlvr.tasks import countdown, gsm8k
from rlvr.tasks.spec import TaskError, TaskSpec

_REGISTRY: dict[str, TaskSpec] = {}


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task; a second, different spec under a registered name is an error."""
    known = _REGISTRY.get(spec.name)
    if known is not None and known != spec:
        raise TaskError(f"task {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> TaskSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise TaskError(f"unknown task {name!r}; the tasks are {names()}") from None


def all_specs() -> list[TaskSpec]:
    return [_REGISTRY[name] for name in names()]


def for_reward_path(path: str | Path) -> TaskSpec | None:
    """The task whose reward file a config points verl at, or None for a foreign reward."""
    wanted = Path(path).resolve()
    for spec in all_specs():
        if spec.reward_file.resolve() == wanted:
            return spec
        # a config composed with another paths.root (a copy of the repo, a test's tmp folder)
        if spec.reward_file.is_relative_to(ROOT):
            tail = spec.reward_file.relative_to(ROOT).parts
            if wanted.parts[-len(tail) :] == tail:
                return spec
    return None


def for_config(config: Any) -> TaskSpec | None:
    return for_reward_path(str(config.custom_reward_function.path))


for _spec in (countdown.SPEC, gsm8k.SPEC):  # the registry line: one entry per task
    register(_spec)

__all__ = ["TaskError", "TaskSpec", "all_specs", "for_config", "get", "names", "register"]

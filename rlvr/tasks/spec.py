"""What a task is to the rest of rlvr: one typed spec, the only thing data prep, eval,
pre-flight, the launchers and the tests need to know about it.

verl fixes three of a task's parts: a reward is a Python file loaded by path
(``custom_reward_function.path``), data is Parquet in its RLHFDataset schema, and a run is a
Hydra config (the task's overlay, ``configs/task/<name>.yaml``, which names the task in
``recipe.task``). A spec ties those together with the task's own prep code; each task module
states its ``SPEC`` field by field. See docs/ADDING_A_TASK.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from rlvr.common.messages import first_line
from rlvr.common.paths import ARTIFACTS, CONFIG_DIR, ROOT
from rlvr.data.prep import PrepResult

RewardFunction = Callable[..., dict[str, Any]]
AnswerKeyFunction = Callable[..., str | None]


class TaskError(Exception):
    """A task name or task file that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class HackingPattern:
    """A response shape the reward scores above 0 that breaks the spirit of the task's output
    contract (the run report's reward-hacking alarm, rlvr/report/alarms.py, counts them)."""

    name: str  # short id, shown in the report
    description: str  # one line: what the response does
    matches: Callable[[str, str], bool]  # (prompt, response) -> whether it shows the pattern


@dataclass(frozen=True)
class TaskSpec:
    name: str  # also its overlay configs/task/<name>.yaml and its data folder
    data_source: str  # the data_source its rows carry, the one its reward grades
    reward_file: Path  # verl loads compute_score from this file by path
    summary: str  # one line: what the task is (the prep and eval --help headline)
    add_prep_arguments: Callable[[argparse.ArgumentParser], None]
    prepare: Callable[[argparse.Namespace], PrepResult]
    # Writes train/val Parquet of the given sizes with no network (rehearsal, tests).
    offline_data: Callable[[Path, int, int], None]
    default_experiment: str  # the task's reference experiment (rlvr.tasks list)
    eval_split: str = "test"
    prep_flags: str = ""  # flags the prep hint adds, e.g. " --val_size 500"
    config_dir: Path = CONFIG_DIR  # the config root holding task/<name>.yaml
    # Held-out checks of rewarded responses (the report's reward-hacking alarm); optional.
    hacking_patterns: tuple[HackingPattern, ...] = ()

    @property
    def overlay(self) -> Path:
        return self.config_dir / "task" / f"{self.name}.yaml"

    @property
    def data_dir(self) -> Path:
        return ARTIFACTS / "data" / self.name

    @property
    def eval_data(self) -> Path:
        return self.data_dir / f"{self.eval_split}.parquet"

    @property
    def prep_command(self) -> str:
        script = ROOT / "scripts" / f"data_prep_{self.name}.py"
        if script.is_file():
            return f"uv run scripts/data_prep_{self.name}.py{self.prep_flags}"
        return f"uv run python -m rlvr.tasks prep {self.name}{self.prep_flags}"

    def load_reward(self) -> RewardFunction:
        return load_reward_function(self.reward_file)

    def load_answer_key(self) -> AnswerKeyFunction | None:
        """The reward file's optional ``answer_key(solution_str, ground_truth, **reward_kwargs)``:
        the answer a response gives (None: none), which eval's maj@k votes on. None when the
        file defines none (then maj@k is not reported)."""
        function = getattr(load_reward_module(self.reward_file), "answer_key", None)
        return function if callable(function) else None

    def check_reward_kwargs(self, kwargs: Mapping[str, object]) -> None:
        """Raise TaskError (one line: the bad name or value, and the valid names) unless the
        reward accepts ``kwargs`` as its ``reward_kwargs``; the reward itself decides, through its
        ``validate_reward_kwargs`` (or, in a reward without one, its signature)."""
        check_reward_kwargs(self.reward_file, kwargs, self.name)


def load_reward_function(path: Path, name: str = "compute_score") -> RewardFunction:
    """``name`` from a reward file, loaded by path the way verl's reward manager does."""
    function = getattr(load_reward_module(path), name, None)
    if not callable(function):
        raise TaskError(f"{Path(path).resolve()}: defines no function {name!r}")
    return function


@cache
def load_reward_module(path: Path) -> ModuleType:
    """A reward file as a module, loaded by path (once per path)."""
    path = Path(path).resolve()
    module_name = f"_rlvr_reward_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise TaskError(f"{path}: no such reward file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise TaskError(f"{path}: could not be imported ({type(exc).__name__}: {exc})") from exc
    return module


def check_reward_kwargs(path: Path, kwargs: Mapping[str, object], task: str) -> None:
    """The reward file's ``validate_reward_kwargs(kwargs)`` as a TaskError; a reward without one
    is checked against its ``compute_score`` signature (names only)."""
    module = load_reward_module(path)
    validate = getattr(module, "validate_reward_kwargs", None)
    try:
        if callable(validate):
            validate(dict(kwargs))
        else:
            _check_by_signature(load_reward_function(path), kwargs, task)
    except ValueError as exc:
        raise TaskError(first_line(exc)) from None
    except TaskError:
        raise
    except Exception as exc:  # a foreign reward's validator failing some other way
        raise TaskError(
            f"{path}: validate_reward_kwargs: {type(exc).__name__}: {first_line(exc)}"
        ) from None


def _check_by_signature(function: RewardFunction, kwargs: Mapping[str, object], task: str) -> None:
    parameters = list(inspect.signature(function).parameters.values())
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return  # it takes any name: only its own calls can tell
    valid = [p.name for p in parameters[4:]]  # after data_source, solution_str, ground_truth, ...
    unknown = [name for name in kwargs if name not in valid]
    if unknown:
        listed = ", ".join(valid) or "none"
        raise TaskError(f"unknown reward kwarg {unknown[0]!r} for {task}; valid: {listed}")

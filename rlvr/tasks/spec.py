"""What a task is to the rest of rlvr: one typed spec, the only thing data prep, eval,
pre-flight, the launchers and the tests need to know about it.

verl fixes three of a task's parts: a reward is a Python file loaded by path
(``custom_reward_function.path``), data is Parquet in its RLHFDataset schema, and a run is a
Hydra config (the task's overlay, ``configs/task/<name>.yaml``). A spec ties those together
with the task's own prep code. See docs/ADDING_A_TASK.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from rlvr.common.paths import ARTIFACTS, CONFIG_DIR, ROOT
from rlvr.data.prep import PrepResult

RewardFunction = Callable[..., dict[str, Any]]


class TaskError(Exception):
    """A task name or task file that cannot be used; the message says which and why."""


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
    default_experiment: str  # what scripts/run_grpo_<name>.sh launches
    eval_split: str = "test"
    prep_flags: str = ""  # flags the prep hint adds, e.g. " --val_size 500"
    config_dir: Path = CONFIG_DIR  # the config root holding task/<name>.yaml

    @classmethod
    def from_module(cls, module: ModuleType, **fields: Any) -> TaskSpec:
        """A spec from a task module's conventional names (``DATA_SOURCE``,
        ``add_prep_arguments``, ``prepare_from_args``, ``offline_data``), named after the module,
        graded by ``rewards/<name>.py``; ``fields`` give the rest or override."""
        name = module.__name__.rsplit(".", 1)[-1]
        conventional: dict[str, Any] = {
            "name": name,
            "data_source": module.DATA_SOURCE,
            "reward_file": ROOT / "rewards" / f"{name}.py",
            "add_prep_arguments": module.add_prep_arguments,
            "prepare": module.prepare_from_args,
            "offline_data": module.offline_data,
        }
        return cls(**{**conventional, **fields})

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

    def training_settings(self) -> tuple[dict[str, Any], int]:
        """The overlay's reward kwargs and max response length (what training uses)."""
        from omegaconf import OmegaConf

        overlay = OmegaConf.load(self.overlay)
        kwargs: Any = OmegaConf.to_container(overlay.custom_reward_function.reward_kwargs)
        return dict(kwargs), int(overlay.data.max_response_length)


@cache
def load_reward_function(path: Path, name: str = "compute_score") -> RewardFunction:
    """``name`` from a reward file, loaded by path the way verl's reward manager does."""
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
    function = getattr(module, name, None)
    if not callable(function):
        raise TaskError(f"{path}: defines no function {name!r}")
    return function

"""The recipes' subclasses of verl 0.6.1's ``TaskRunner`` and ``RayPPOTrainer``, the way verl's
own recipes extend it (recipe/dapo: a ``main_dapo.py`` and a trainer subclass). Neither copies
verl's code: each override calls verl's method and adds what the recipes need around it.

``RecipeTaskRunner.run`` (the Ray actor ``rlvr.train.main`` starts instead of verl's):
- registers the recipes' advantage estimators in verl's registry (``rlvr.train.advantages``);
- points verl's ``file`` logger at the run's ``paths.metrics`` (``VERL_FILE_LOGGER_PATH``: it
  cannot come from the config's runtime env, which verl merges away from the config's root
  without resolving it, so an interpolation would arrive as the literal ``${...}``);
- runs verl's ``TaskRunner.run`` with the two rebindings of ``rlvr.train.verl_patches``;
- finishes wandb when training returns: verl 0.6.1 calls ``wandb.finish()`` only in its tracker's
  ``__del__``, which need not run before Ray ends the actor, so the last steps were lost.

``RecipeTrainer._dump_generations`` keeps verl's rollout dumps bounded (``rollout_dumps`` in
configs/grpo.yaml): verl writes a file per step and never deletes one.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from omegaconf import OmegaConf
from verl.trainer.main_ppo import TaskRunner
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from rlvr.common.verl_guards import require_parameters
from rlvr.train.verl_patches import FILE_LOGGER_PATH_ENV, plain, verl_as_the_recipes_run_it

METRICS_PATH_KEY = "paths.metrics"  # the config key that sets VERL_FILE_LOGGER_PATH
DUMP_GENERATIONS_PARAMS = (
    "self",
    "inputs",
    "outputs",
    "gts",
    "scores",
    "reward_extra_infos_dict",
    "dump_path",
)


class RecipeTrainer(RayPPOTrainer):
    """verl's trainer, with its rollout dumps bounded."""

    def _dump_generations(
        self,
        inputs: list[str],
        outputs: list[str],
        gts: list[Any],
        scores: list[float],
        reward_extra_infos_dict: dict[str, Any],
        dump_path: str,
    ) -> None:
        # verl's dapo reward manager records 0-d tensors (overlong_reward), which json.dumps in
        # verl's dump refuses: plain numbers.
        extras = {
            key: [plain(item) for item in values] if isinstance(values, list) else values
            for key, values in reward_extra_infos_dict.items()
        }
        super()._dump_generations(inputs, outputs, gts, scores, extras, dump_path)
        bounds = self.config.get("rollout_dumps") or {}
        if bounds and dump_path == self.config.trainer.get("rollout_data_dir"):
            prune_step_files(dump_path, int(bounds["keep_last"]), int(bounds["keep_every"]))


def check_verl() -> None:
    """Refuse a verl whose ``_dump_generations`` is not the one ``RecipeTrainer`` overrides."""
    require_parameters(
        RayPPOTrainer._dump_generations, DUMP_GENERATIONS_PARAMS, owner="rlvr/train/trainer.py"
    )


check_verl()


class RecipeTaskRunner(TaskRunner):
    """verl's TaskRunner, running ``RecipeTrainer`` (see the module docstring)."""

    def run(self, config: Any) -> None:
        from rlvr.train import advantages

        advantages.register()
        set_metrics_path(config)
        try:
            with verl_as_the_recipes_run_it(RecipeTrainer):
                super().run(config)
        finally:
            finish_wandb()


def finish_wandb() -> None:
    """Finish the wandb run and wait for wandb's service to write it: ``finish`` returns once
    the run is handed over, and Ray ends the actor without atexit hooks (a rehearsal once found
    the run file cut at 32 KiB)."""
    wandb = sys.modules.get("wandb")
    if wandb is None:
        return
    if wandb.run is not None:
        wandb.finish()
    wandb.teardown()


def prune_step_files(folder: str, keep_last: int, keep_every: int) -> list[str]:
    """Delete ``<step>.jsonl`` files in ``folder`` except the newest ``keep_last`` steps and
    every step divisible by ``keep_every`` (0: none); returns the deleted names."""
    steps = sorted(
        int(name[: -len(".jsonl")])
        for name in os.listdir(folder)
        if name.endswith(".jsonl") and name[: -len(".jsonl")].isdigit()
    )
    newest = set(steps[-keep_last:]) if keep_last > 0 else set()
    deleted = []
    for step in steps:
        if step in newest or (keep_every > 0 and step % keep_every == 0):
            continue
        os.remove(os.path.join(folder, f"{step}.jsonl"))
        deleted.append(f"{step}.jsonl")
    return deleted


def set_metrics_path(config: Any) -> str | None:
    """``VERL_FILE_LOGGER_PATH`` = the resolved ``paths.metrics``, when the config has one (it
    decides over an inherited value, so the sweep always finds its file); returns it."""
    path = OmegaConf.select(config, METRICS_PATH_KEY, default=None)
    if path is None:
        return None
    os.environ[FILE_LOGGER_PATH_ENV] = str(path)
    return str(path)

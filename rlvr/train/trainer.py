"""The recipes' subclasses of verl 0.6.1's ``TaskRunner`` and ``RayPPOTrainer``, the way verl's
own recipes extend it (recipe/dapo: a ``main_dapo.py`` and a trainer subclass). Neither copies
verl's code: each override calls verl's method and adds what the recipes need around it.

``RecipeTaskRunner.run`` (the Ray actor ``rlvr.train.main`` starts instead of verl's):
- registers the recipes' advantage estimators in verl's registry (``rlvr.train.advantages``);
- points verl's ``file`` logger at the run's ``paths.metrics`` (``VERL_FILE_LOGGER_PATH``: it
  cannot come from the config's runtime env, which verl merges away from the config's root
  without resolving it, so an interpolation would arrive as the literal ``${...}``);
- runs verl's ``TaskRunner.run`` with the two rebindings of ``rlvr.train.verl_patches``;
- builds the actor workers (and the reference, which shares their class) with
  ``rlvr.train.token_mean.TokenMeanActor``: a token-mean loss over the whole mini batch and logged
  losses that are that mean, whatever the micro batches;
- finishes wandb when training returns (``rlvr.report.loggers.finish_wandb``): verl 0.6.1 calls
  ``wandb.finish()`` only in its tracker's ``__del__``, which need not run before Ray ends the
  actor, so the last steps were lost.

``RecipeTrainer`` (verl's ``RayPPOTrainer``):
- ``fit`` first writes the run's identity into its checkpoint folder (model, task, topology,
  LoRA rank: ``rlvr.preflight.run_identity``), so that pre-flight can refuse resuming another
  run's checkpoints; then ``run_plan.json`` (the steps it will train) beside the metrics, so
  that the report can tell a finished run from one stopped early (``rlvr.report.run_plan``);
- ``_save_checkpoint`` then deletes the oldest ``global_step_N`` beyond
  ``trainer.max_actor_ckpt_to_keep``: verl's rotation only knows the checkpoints saved since the
  process started (its ``previous_saved_paths`` starts empty), so after a resume the ones saved
  before it were kept for ever and the disk budget pre-flight promised no longer held;
- ``_dump_generations`` keeps verl's rollout dumps bounded (``rollout_dumps`` in
  configs/grpo.yaml): verl writes a file per step and never deletes one;
- ``_log_rollout_data`` (the training dump's only caller, which holds the batch) adds each
  response's token count and whether it hit max_response_length to its dump line: verl passes
  ``_dump_generations`` decoded text only, and the report's alarm on cut answers needs the cut.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from verl.trainer.main_ppo import TaskRunner
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from rlvr.common.checkpoints import saved_steps
from rlvr.common.verl_guards import require_parameters
from rlvr.preflight.run_identity import write_identity
from rlvr.report.loggers import FILE_LOGGER_PATH_ENV, finish_wandb, plain
from rlvr.report.records import RESPONSE_LENGTH_KEY, TRUNCATED_KEY
from rlvr.report.references import plan_fields
from rlvr.report.run_plan import write_run_plan
from rlvr.train.verl_patches import verl_as_the_recipes_run_it

METRICS_PATH_KEY = "paths.metrics"  # the config key that sets VERL_FILE_LOGGER_PATH
DELETING_PREFIX = ".deleting-"  # a checkpoint being deleted, renamed out of verl's sight
DUMP_GENERATIONS_PARAMS = (
    "self",
    "inputs",
    "outputs",
    "gts",
    "scores",
    "reward_extra_infos_dict",
    "dump_path",
)
LOG_ROLLOUT_DATA_PARAMS = (
    "self",
    "batch",
    "reward_extra_infos_dict",
    "timing_raw",
    "rollout_data_dir",
)


class RecipeTrainer(RayPPOTrainer):
    """verl's trainer, with a run plan, checkpoints bounded across resumes and rollout dumps
    bounded and carrying each response's length (see the module docstring)."""

    def fit(self) -> None:
        try:  # before verl loads a checkpoint: pre-flight checks the next run against it
            write_identity(self.config)
        except OSError as exc:  # verl's own saves there will say more
            print(f"rlvr: warning: run identity not written: {exc}", file=sys.stderr, flush=True)
        folder = run_folder(self.config)
        if folder is not None:
            # verl stops at total_training_steps or when the epochs run out, whichever is first
            epochs = len(self.train_dataloader) * int(self.config.trainer.total_epochs)
            steps = min(int(self.total_training_steps), epochs)
            write_run_plan(
                folder,
                steps,
                self.config.trainer.get("experiment_name"),
                checkpoints=self.config.trainer.default_local_dir,
                **plan_fields(self.config),  # model, task, protocol: the reference bands' keys
            )
        super().fit()

    def _save_checkpoint(self) -> None:
        super()._save_checkpoint()
        keep = self.config.trainer.get("max_actor_ckpt_to_keep")
        if keep is not None and int(keep) > 0:
            removed = prune_checkpoints(self.config.trainer.default_local_dir, int(keep))
            if removed:
                print(
                    f"rlvr: max_actor_ckpt_to_keep={keep}: removed {', '.join(removed)}"
                    " (saved before this process; verl's rotation does not know them)",
                    flush=True,
                )

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

    def _log_rollout_data(
        self,
        batch: Any,
        reward_extra_infos_dict: dict[str, Any],
        timing_raw: dict[str, Any],
        rollout_data_dir: str,
    ) -> None:
        lengths, truncated = response_lengths(
            batch.batch["responses"], batch.batch["attention_mask"]
        )
        # the reward's own keys win (a new dict: verl adds request_id to the one it is passed)
        extras = {RESPONSE_LENGTH_KEY: lengths, TRUNCATED_KEY: truncated, **reward_extra_infos_dict}
        super()._log_rollout_data(batch, extras, timing_raw, rollout_data_dir)


def response_lengths(responses: Any, attention_mask: Any) -> tuple[list[int], list[bool]]:
    """Each response's token count and whether it filled the response width
    (max_response_length), as verl 0.6.1 counts them for ``response_length/clip_ratio``
    (``metric_utils._compute_response_info``: the attention mask over the response columns)."""
    width = responses.shape[-1]
    lengths = attention_mask[:, -width:].sum(-1).tolist()
    return [int(n) for n in lengths], [int(n) == width for n in lengths]


def check_verl() -> None:
    """Refuse a verl whose methods ``RecipeTrainer`` overrides take other parameters."""
    owner = "rlvr/train/trainer.py"
    require_parameters(RayPPOTrainer._dump_generations, DUMP_GENERATIONS_PARAMS, owner=owner)
    require_parameters(RayPPOTrainer._log_rollout_data, LOG_ROLLOUT_DATA_PARAMS, owner=owner)
    require_parameters(RayPPOTrainer._save_checkpoint, ("self",), owner=owner)
    require_parameters(RayPPOTrainer.fit, ("self",), owner=owner)


check_verl()


class RecipeTaskRunner(TaskRunner):
    """verl's TaskRunner, running ``RecipeTrainer`` (see the module docstring)."""

    def add_actor_rollout_worker(self, config: Any) -> tuple[type, type]:
        """verl's choice of actor worker, with the token-mean actor (``rlvr.train.token_mean``)."""
        import ray
        from verl.trainer.ppo.ray_trainer import Role

        from rlvr.train.advantages import DROP_CONSTANT
        from rlvr.train.token_mean import recipe_worker

        worker_class, group_class = super().add_actor_rollout_worker(config)
        if config.actor_rollout_ref.actor.strategy not in {"fsdp", "fsdp2"}:
            return worker_class, group_class  # megatron: verl's own actor
        skip = config.algorithm.adv_estimator == DROP_CONSTANT
        worker_class = recipe_worker(worker_class, skip_constant_batches=skip)
        self.role_worker_mapping[Role.ActorRollout] = ray.remote(worker_class)
        return worker_class, group_class

    def run(self, config: Any) -> None:
        from rlvr.train import advantages

        advantages.register()
        set_metrics_path(config)
        try:
            with verl_as_the_recipes_run_it(RecipeTrainer):
                super().run(config)
        finally:
            finish_wandb()


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


def prune_checkpoints(folder: str, keep: int) -> list[str]:
    """Delete the oldest ``global_step_N`` folders in ``folder`` beyond the newest ``keep``;
    returns their names. Each is renamed away first (one atomic step), so a kill mid-delete
    leaves no half checkpoint under a checkpoint's name; leftovers of that are removed too."""
    root = Path(folder)
    for stale in root.glob(f"{DELETING_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    steps = saved_steps(root)
    removed = []
    for step in steps[: max(len(steps) - keep, 0)]:
        doomed = root / f"{DELETING_PREFIX}global_step_{step}"
        os.rename(root / f"global_step_{step}", doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(f"global_step_{step}")
    return removed


def run_folder(config: Any) -> str | None:
    """The run's folder, where ``paths.metrics`` is (None without one)."""
    metrics = OmegaConf.select(config, METRICS_PATH_KEY, default=None)
    return os.path.dirname(str(metrics)) if metrics else None


def set_metrics_path(config: Any) -> str | None:
    """``VERL_FILE_LOGGER_PATH`` = the resolved ``paths.metrics``, when the config has one (it
    decides over an inherited value, so the sweep always finds its file); returns it."""
    path = OmegaConf.select(config, METRICS_PATH_KEY, default=None)
    if path is None:
        return None
    os.environ[FILE_LOGGER_PATH_ENV] = str(path)
    return str(path)

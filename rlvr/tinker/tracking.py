"""A Tinker run's loggers: verl's own ``Tracking`` (verl/utils/tracking.py), built as verl's
trainer builds it in ``RayPPOTrainer.fit`` (``trainer.project_name``, ``trainer.experiment_name``,
the backends of ``trainer.logger``, the composed config resolved as the run's config), so that a
Tinker run lands on the same WandB project, under the same names and metric keys, as a verl run
of the recipe; and the validation generations table through verl's own
``ValidationGenerationsLogger``, chosen by verl's own ``_maybe_log_val_generations``.

- ``file``: metrics.jsonl through verl's file logger with the recipes' fix, as for a verl run
  (``rlvr.report.loggers``), at ``paths.metrics``.
- ``wandb``: online or offline as wandb decides (``WANDB_MODE``; ``scripts/train.sh`` sets it
  offline when no key is configured, as for verl runs), grouped by ``WANDB_RUN_GROUP`` (a sweep's
  points: the sweep's name). A run resumed from a checkpoint continues its WandB run: its id is
  kept in the run folder (``wandb_run_id.txt``) and handed to ``wandb.init`` with
  ``resume="allow"`` through ``WANDB_RUN_ID`` and ``WANDB_RESUME``, which wandb reads from the
  environment (verl's ``Tracking`` passes neither argument; the variables are set only while it
  is built). Offline, wandb writes the continuation to a new ``offline-run-*`` folder with the
  same id (``wandb sync`` the first, then ``wandb sync --append`` the next).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from rlvr.common.files import write_text_atomic
from rlvr.common.verl_guards import require_parameters, require_source
from rlvr.report.loggers import FILE_LOGGER_PATH_ENV, file_logger_fixed, finish_wandb
from rlvr.tinker.recipe import TinkerRecipe
from rlvr.tinker.service import TinkerRunError

RUN_ID_FILE = "wandb_run_id.txt"
OWNER = "rlvr/tinker/tracking.py"
#: verl 0.6.1's choice of the validation samples a table shows, and how it logs them.
GENERATIONS_PARAMS = ("self", "inputs", "outputs", "scores")
GENERATIONS_LINE = (
    "self.validation_generations_logger.log(self.config.trainer.logger, samples, self.global_steps)"
)


@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in this process's environment within, the previous ones after."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def wandb_run_id(run_dir: Path, resuming: bool) -> str:
    """The run's WandB id: the stored one when the run resumes from a checkpoint, else a new one
    (stored for the resumes to come)."""
    from wandb.util import generate_id

    path = run_dir / RUN_ID_FILE
    if resuming and path.is_file() and (stored := path.read_text(encoding="utf-8").strip()):
        return stored
    new = str(generate_id())
    write_text_atomic(path, new + "\n")
    return new


class RunLog:
    """The run's metrics and validation tables, to every backend of ``trainer.logger``."""

    def __init__(self, recipe: TinkerRecipe, resuming: bool) -> None:
        from verl.utils.tracking import Tracking, ValidationGenerationsLogger

        self.recipe = recipe
        unknown = [name for name in recipe.loggers if name not in Tracking.supported_backend]
        if unknown:  # refused before verl's own assert, whose half-built Tracking's __del__ fails
            raise TinkerRunError(
                f"trainer.logger={list(recipe.loggers)}: verl does not know {', '.join(unknown)} "
                f"(it knows {', '.join(Tracking.supported_backend)})"
            )
        variables = {FILE_LOGGER_PATH_ENV: str(recipe.metrics_path)}
        if "wandb" in recipe.loggers:
            recipe.run_dir.mkdir(parents=True, exist_ok=True)
            variables["WANDB_RUN_ID"] = wandb_run_id(recipe.run_dir, resuming)
            if resuming:  # (a fresh id has nothing to resume; offline, wandb warns it ignores it)
                variables["WANDB_RESUME"] = "allow"
        with environment(variables), file_logger_fixed():
            self.tracking = Tracking(
                project_name=recipe.project,
                experiment_name=recipe.experiment,
                default_backend=list(recipe.loggers),
                config=recipe.resolved,
            )
        self.generations = ValidationGenerationsLogger(recipe.project, recipe.experiment)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.tracking.log(data=dict(metrics), step=step)

    def log_generations(
        self, inputs: Sequence[str], outputs: Sequence[str], scores: Sequence[float], step: int
    ) -> None:
        """A validation's samples as verl logs them: ``trainer.log_val_generations`` of them,
        chosen by verl's own method (sorted, then shuffled with its fixed seed), as the
        ``val/generations`` table. The method reads three attributes of verl's trainer, which a
        Tinker run has none of: they are given here."""
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer

        choose = RayPPOTrainer._maybe_log_val_generations
        require_parameters(choose, GENERATIONS_PARAMS, owner=OWNER)
        require_source(choose, GENERATIONS_LINE, f"its table would not be logged; update {OWNER}")
        config = SimpleNamespace(
            trainer=SimpleNamespace(
                log_val_generations=self.recipe.val_generations, logger=list(self.recipe.loggers)
            )
        )
        stand_in = SimpleNamespace(
            config=config, validation_generations_logger=self.generations, global_steps=step
        )
        choose(stand_in, list(inputs), list(outputs), list(scores))  # type: ignore[arg-type]

    def finish(self, exit_code: int) -> None:
        """wandb's run finished with ``exit_code`` and written; metrics.jsonl closed."""
        if "wandb" in self.tracking.logger:
            finish_wandb(exit_code)
        if "file" in self.tracking.logger:
            self.tracking.logger["file"].finish()


@contextmanager
def run_log(recipe: TinkerRecipe, resuming: bool) -> Iterator[RunLog]:
    """The run's loggers for a block, finished after it with the exit code the run ends with
    (0; 128 + the signal of a stop; 1 on a failure), so that even a stopped run's WandB file is
    whole."""
    from rlvr.common.signals import interrupt_signal

    log = RunLog(recipe, resuming)
    code = 1
    try:
        yield log
        code = 0
    except KeyboardInterrupt as exc:
        code = 128 + interrupt_signal(exc)
        raise
    finally:
        log.finish(code)

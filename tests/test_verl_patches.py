"""rlvr/train/verl_patches.py: the two names every recipe run rebinds in verl 0.6.1 (the file
logger's fix itself: tests/test_loggers.py), with a guard against a changed verl."""

from __future__ import annotations

from typing import Any

import pytest
from verl.trainer import main_ppo
from verl.utils import tracking

from rlvr.train.verl_patches import verl_as_the_recipes_run_it


def test_within_the_context_verl_builds_the_given_trainer_and_logs_with_the_fix() -> None:
    trainer, logger = main_ppo.RayPPOTrainer, tracking.FileLogger

    class Trainer:
        pass

    with verl_as_the_recipes_run_it(Trainer):
        assert main_ppo.RayPPOTrainer is Trainer
        assert issubclass(tracking.FileLogger, logger) and tracking.FileLogger is not logger
    assert (main_ppo.RayPPOTrainer, tracking.FileLogger) == (trainer, logger)  # restored


def test_trainer_rebinding_refuses_a_taskrunner_that_no_longer_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class TaskRunner:  # a later verl whose run takes the trainer class from elsewhere
        def run(self, config: Any) -> None:
            trainer = config.trainer_class(config=config)
            trainer.fit()

    monkeypatch.setattr(main_ppo, "TaskRunner", TaskRunner)
    refused = pytest.raises(RuntimeError, match="no longer contains 'trainer = RayPPOTrainer\\('")
    with refused, verl_as_the_recipes_run_it(object):
        pass


def test_trainer_rebinding_refuses_a_run_that_imports_the_trainer_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The line alone is not enough: a run that imports RayPPOTrainer itself would build verl's
    own whatever main_ppo's name says."""

    class TaskRunner:
        def run(self, config: Any) -> None:
            from verl.trainer.ppo.ray_trainer import RayPPOTrainer

            trainer = RayPPOTrainer(config=config)
            trainer.fit()

    monkeypatch.setattr(main_ppo, "TaskRunner", TaskRunner)
    refused = pytest.raises(RuntimeError, match="does not take RayPPOTrainer from main_ppo")
    with refused, verl_as_the_recipes_run_it(object):
        pass

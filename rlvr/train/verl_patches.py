"""The two places where every recipe run changes verl 0.6.1 by rebinding one of its names.

Everything else the recipes change is an extension verl offers (docs/TRAINING.md, "What runs"
lists them all): the entry point ``rlvr.train.main`` and its ``TaskRunner`` / ``RayPPOTrainer``
subclasses (``rlvr.train.trainer``), an advantage estimator in verl's registry, a reward file, a
dataset class. The CPU path's fixes are ``rlvr/cpu/compat.py`` (GRPO) and ``rlvr/cpu/sft.py``.
Both rebindings below are made in the TaskRunner process only, by ``RecipeTaskRunner.run`` (a
Tinker run makes the first in its own process), and each refuses, naming the file that makes it,
a verl whose code is not the one read here.

1. ``verl.utils.tracking.FileLogger`` -> ``FixedFileLogger`` (``rlvr.report.loggers``, which
   says why; a Tinker run builds verl's ``Tracking`` with the same fix): verl 0.6.1's ``file``
   logger raises on its own tensor metrics, truncates its file on resume and never flushes.
2. ``verl.trainer.main_ppo.RayPPOTrainer`` -> the recipes' subclass. ``TaskRunner.run`` builds
   its trainer by that module-level name (main_ppo.py: ``trainer = RayPPOTrainer(``) and takes
   no class argument, so rebinding the name is how a subclass gets in without copying ``run``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rlvr.common.verl_guards import require_source
from rlvr.report.loggers import file_logger_fixed

OWNER = "rlvr/train/verl_patches.py"
# The line of verl 0.6.1's TaskRunner.run that the trainer rebinding relies on.
TRAINER_CONSTRUCTION = "trainer = RayPPOTrainer("


@contextmanager
def verl_as_the_recipes_run_it(trainer_class: type) -> Iterator[None]:
    """Within: verl's file logger fixed and ``TaskRunner.run`` building ``trainer_class``."""
    from verl.trainer import main_ppo

    run = main_ppo.TaskRunner.run
    consequence = f"the recipes' trainer would not be used; update {OWNER}"
    require_source(run, TRAINER_CONSTRUCTION, consequence)
    # ... and the name is the module's, looked up when run runs, not a local or an import in run
    if "RayPPOTrainer" not in run.__code__.co_names or "RayPPOTrainer" in run.__code__.co_varnames:
        raise RuntimeError(
            f"verl's TaskRunner.run does not take RayPPOTrainer from main_ppo; {consequence}"
        )
    saved = main_ppo.RayPPOTrainer
    main_ppo.RayPPOTrainer = trainer_class  # type: ignore[misc,assignment]
    try:
        with file_logger_fixed():
            yield
    finally:
        main_ppo.RayPPOTrainer = saved  # type: ignore[misc]

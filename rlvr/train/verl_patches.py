"""The two places where every recipe run changes verl 0.6.1 by rebinding one of its names.

Everything else the recipes change is an extension verl offers (docs/TRAINING.md, "What runs"
lists them all): the entry point ``rlvr.train.main`` and its ``TaskRunner`` / ``RayPPOTrainer``
subclasses (``rlvr.train.trainer``), an advantage estimator in verl's registry, a reward file, a
dataset class. The CPU path's fixes are ``rlvr/cpu/compat.py`` (GRPO) and ``rlvr/cpu/sft.py``.
Both rebindings below are made in the TaskRunner process only, by ``RecipeTaskRunner.run``, and
each refuses, naming this file, a verl whose code is not the one read here.

1. ``verl.utils.tracking.FileLogger`` -> ``FixedFileLogger``. verl 0.6.1's ``file`` logger
   (tracking.py, ``FileLogger.log``: ``self.fp.write(json.dumps(data) + "\\n")``) raises
   ``TypeError: Object of type Tensor is not JSON serializable`` on the first training step, as
   verl's own ``global_seqlen/*`` metrics are 0-d tensors (and validation can give np.float32,
   Agent-R1 issue 83); it opens its file with ``"w"``, so a resumed run erases the steps before
   it, never flushes, and cannot open ``VERL_FILE_LOGGER_PATH`` in a folder that does not exist.
   The fixed one also cuts a torn last line (a run killed mid-write) before it appends, so a
   resumed run's first record does not land glued to it.
   Upstream fix of the TypeError: verl PR 4811 ("fix: json encode error in filelogger").
2. ``verl.trainer.main_ppo.RayPPOTrainer`` -> the recipes' subclass. ``TaskRunner.run`` builds
   its trainer by that module-level name (main_ppo.py: ``trainer = RayPPOTrainer(``) and takes
   no class argument, so rebinding the name is how a subclass gets in without copying ``run``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlvr.common.verl_guards import require_parameters, require_source
from rlvr.report.metrics_log import drop_torn_tail

FILE_LOGGER_PATH_ENV = "VERL_FILE_LOGGER_PATH"  # read by verl's FileLogger
OWNER = "rlvr/train/verl_patches.py"
# The line of verl 0.6.1's TaskRunner.run that the trainer rebinding relies on.
TRAINER_CONSTRUCTION = "trainer = RayPPOTrainer("


def plain(value: Any) -> Any:
    """A numpy or torch value (scalar or array) as Python numbers (``tolist`` is ``item`` for a
    scalar); anything else unchanged."""
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else value


def plain_json(value: Any) -> Any:
    """For ``json.dumps(default=...)``: ``plain``, or the TypeError json.dumps expects."""
    converted = plain(value)
    if converted is value:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    return converted


def fixed_file_logger(verl_file_logger: type) -> type:
    """verl 0.6.1's ``FileLogger`` made to work (item 1 of the module docstring)."""
    for name, params in (
        ("__init__", ("self", "project_name", "experiment_name")),
        ("log", ("self", "data", "step")),
        ("finish", ("self",)),
    ):
        require_parameters(getattr(verl_file_logger, name), params, owner=OWNER)

    class FixedFileLogger(verl_file_logger):
        def __init__(self, project_name: str, experiment_name: str) -> None:
            self.project_name = project_name
            self.experiment_name = experiment_name
            self.filepath = os.environ.get(FILE_LOGGER_PATH_ENV) or os.path.join(
                os.path.expanduser(os.environ.get("VERL_FILE_LOGGER_ROOT", ".")),
                project_name,
                f"{experiment_name}.jsonl",
            )
            os.makedirs(os.path.dirname(os.path.abspath(self.filepath)), exist_ok=True)
            if torn := drop_torn_tail(Path(self.filepath)):
                print(f"file logger: dropped a torn last line ({torn} bytes) of {self.filepath}")
            print(f"file logger: appending to {self.filepath}")
            self.fp = open(self.filepath, "a", encoding="utf-8")  # noqa: SIM115 (finish closes)

        def log(self, data: dict[str, Any], step: int) -> None:
            self.fp.write(json.dumps({"step": step, "data": data}, default=plain_json) + "\n")
            self.fp.flush()  # a run that dies keeps every step it logged

    return FixedFileLogger


@contextmanager
def verl_as_the_recipes_run_it(trainer_class: type) -> Iterator[None]:
    """Within: verl's file logger fixed and ``TaskRunner.run`` building ``trainer_class``."""
    from verl.trainer import main_ppo
    from verl.utils import tracking

    run = main_ppo.TaskRunner.run
    consequence = f"the recipes' trainer would not be used; update {OWNER}"
    require_source(run, TRAINER_CONSTRUCTION, consequence)
    # ... and the name is the module's, looked up when run runs, not a local or an import in run
    if "RayPPOTrainer" not in run.__code__.co_names or "RayPPOTrainer" in run.__code__.co_varnames:
        raise RuntimeError(
            f"verl's TaskRunner.run does not take RayPPOTrainer from main_ppo; {consequence}"
        )
    saved = main_ppo.RayPPOTrainer, tracking.FileLogger
    main_ppo.RayPPOTrainer = trainer_class  # type: ignore[misc,assignment]
    tracking.FileLogger = fixed_file_logger(tracking.FileLogger)  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        main_ppo.RayPPOTrainer, tracking.FileLogger = saved  # type: ignore[misc]

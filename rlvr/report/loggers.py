"""The writing side of a run's records, for both launch paths: verl's own loggers
(``verl.utils.tracking``), fixed where verl 0.6.1 needs it. A verl run's TaskRunner
(``rlvr.train.verl_patches``) and a Tinker run (``rlvr.tinker.tracking``) both build verl's
``Tracking`` within ``file_logger_fixed()`` and end with ``finish_wandb``; ``metrics_log`` reads
back what the file logger wrote.

1. ``verl.utils.tracking.FileLogger`` -> ``FixedFileLogger``. verl 0.6.1's ``file`` logger
   (tracking.py, ``FileLogger.log``: ``self.fp.write(json.dumps(data) + "\\n")``) raises
   ``TypeError: Object of type Tensor is not JSON serializable`` on the first training step, as
   verl's own ``global_seqlen/*`` metrics are 0-d tensors (and validation can give np.float32,
   Agent-R1 issue 83); it opens its file with ``"w"``, so a resumed run erases the steps before
   it, never flushes, and cannot open ``VERL_FILE_LOGGER_PATH`` in a folder that does not exist.
   The fixed one also cuts a torn last line (a run killed mid-write) before it appends, so a
   resumed run's first record does not land glued to it.
   Upstream fix of the TypeError: verl PR 4811 ("fix: json encode error in filelogger").
2. wandb finished and written before the process ends: verl 0.6.1 calls ``wandb.finish()`` only
   in its tracker's ``__del__``, which need not run before Ray ends the actor, so the last steps
   were lost.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlvr.common.verl_guards import require_parameters
from rlvr.report.metrics_log import drop_torn_tail

FILE_LOGGER_PATH_ENV = "VERL_FILE_LOGGER_PATH"  # read by verl's FileLogger
OWNER = "rlvr/report/loggers.py"


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
def file_logger_fixed() -> Iterator[None]:
    """Within: ``verl.utils.tracking.FileLogger`` is the fixed one (``Tracking`` looks the name
    up when it is built); verl's own again after."""
    from verl.utils import tracking

    saved = tracking.FileLogger
    tracking.FileLogger = fixed_file_logger(saved)  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        tracking.FileLogger = saved  # type: ignore[misc]


def finish_wandb(exit_code: int = 0) -> None:
    """Finish the wandb run and wait for wandb's service to write it: ``finish`` returns once
    the run is handed over, and Ray ends the actor without atexit hooks (a rehearsal once found
    the run file cut at 32 KiB). ``exit_code``: what the run record says it ended with."""
    wandb = sys.modules.get("wandb")
    if wandb is None:
        return
    if wandb.run is not None:
        wandb.finish(exit_code=exit_code)
    wandb.teardown()

"""The recipes' GRPO entry point: verl 0.6.1's ``main_ppo`` with the recipes' TaskRunner, then
the run report.

``scripts/train.sh`` runs ``python -m rlvr.train.main --config-path <repo>/configs
--config-name EXPERIMENT [overrides]`` (an absolute path: Hydra would read a relative one from
this folder), as verl's recipes run their own ``main_*.py``. It calls verl's ``run_ppo`` (Ray
start, the TaskRunner actor) with ``RecipeTaskRunner`` (``rlvr.train.trainer``; every change to
verl is listed in docs/TRAINING.md, "What runs"), and once training returns writes the run
report (``rlvr.report``: report.md, curves, alarms) beside the checkpoints, here in the driver
rather than in the Ray actor.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import hydra
import ray
from verl.trainer.main_ppo import run_ppo

from rlvr.common.disk_full import DISK_FULL_EXIT, disk_full_message, disk_full_of
from rlvr.common.signals import STOP_SIGNALS
from rlvr.common.supervision import stop_with_parent
from rlvr.planning.checkpoint_budget import checkpoint_bytes, model_size
from rlvr.train.trainer import RecipeTaskRunner, run_folder


@hydra.main(config_path=None, config_name=None, version_base=None)
def main(config: Any) -> None:
    # Stopped by the launcher's supervisor, or by the kernel when that supervisor dies: exit
    # through SystemExit, so that atexit's ray.shutdown() stops the Ray this driver started.
    stop_with_parent()
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda received, _: sys.exit(128 + received))
    try:
        # As verl's main_ppo: the TaskRunner asks for one CPU ("make sure main_task is not
        # scheduled on head", its comment says).
        run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(RecipeTaskRunner))
    except Exception as exc:
        full = disk_full_line(config, exc)
        if full is None:
            raise
        ray.shutdown()  # the workers' last log lines first, so that this line ends the output
        print(f"error: {full}", file=sys.stderr, flush=True)
        raise SystemExit(DISK_FULL_EXIT) from None
    write_run_report(run_dir(config))


def run_dir(config: Any) -> str:
    """The run's folder: where ``paths.metrics`` is (the checkpoints' folder, or a sweep's
    point), else ``trainer.default_local_dir``."""
    return run_folder(config) or str(config.trainer.default_local_dir)


def disk_full_line(config: Any, exc: BaseException) -> str | None:
    """A full disk anywhere in the run (a worker's checkpoint shard arrives wrapped in Ray's
    errors, with the worker's traceback as text) as one line naming the checkpoint folder and
    one checkpoint's size; None for any other failure."""
    folder = str(config.trainer.default_local_dir)
    if disk_full_of(exc, path=folder) is None:
        return None
    try:
        size = model_size(config)
        needed = checkpoint_bytes(config, size)[0] if size is not None else None
    except Exception:  # the estimate is a courtesy: the line must come out regardless
        needed = None
    return disk_full_message(folder, needed)


def write_run_report(folder: str) -> None:
    """The run report (``scripts/report.py``) written when training ends. A report that cannot
    be made is a printed line, never a failed run: the run itself is done and saved."""
    try:
        from rlvr.report import build

        report = build(folder)
    except Exception as exc:  # any failure here is only a missing report
        print(f"rlvr: no run report for {folder}: {type(exc).__name__}: {exc}", flush=True)
        return
    fired = ", ".join(alarm.key for alarm in report.fired) or "none"
    print(f"rlvr: run report {report.path} (alarms fired: {fired})", flush=True)
    print(f"rlvr: run status: {report.records.status}", flush=True)


if __name__ == "__main__":
    main()

"""The recipes' GRPO entry point: verl 0.6.1's ``main_ppo`` with the recipes' TaskRunner, then
the run report.

``scripts/launch_grpo.sh`` runs ``python -m rlvr.train.main --config-path <repo>/configs
--config-name EXPERIMENT [overrides]`` (an absolute path: Hydra would read a relative one from
this folder), as verl's recipes run their own ``main_*.py``. It calls verl's ``run_ppo`` (Ray
start, the TaskRunner actor) with ``RecipeTaskRunner`` (``rlvr.train.trainer``; every change to
verl is listed in docs/TRAINING.md, "What runs"), and once training returns writes the run
report (``rlvr.report``: report.md, curves, alarms) beside the checkpoints, here in the driver
rather than in the Ray actor.
"""

from __future__ import annotations

import os
from typing import Any

import hydra
import ray
from omegaconf import OmegaConf
from verl.trainer.main_ppo import run_ppo

from rlvr.train.trainer import METRICS_PATH_KEY, RecipeTaskRunner


@hydra.main(config_path=None, config_name=None, version_base=None)
def main(config: Any) -> None:
    # As verl's main_ppo: the TaskRunner asks for one CPU ("make sure main_task is not scheduled
    # on head", its comment says).
    run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(RecipeTaskRunner))
    write_run_report(run_dir(config))


def run_dir(config: Any) -> str:
    """The run's folder: where ``paths.metrics`` is (the checkpoints' folder, or a sweep's
    point), else ``trainer.default_local_dir``."""
    metrics = OmegaConf.select(config, METRICS_PATH_KEY, default=None)
    return os.path.dirname(str(metrics)) if metrics else str(config.trainer.default_local_dir)


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


if __name__ == "__main__":
    main()

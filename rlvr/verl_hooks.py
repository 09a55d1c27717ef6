"""Ray worker setup for every recipe run: ``worker_process_setup_hook: rlvr.verl_hooks.install``.

Set in ``configs/grpo.yaml``, so it runs in each Ray worker process (TaskRunner included) before
verl's code does. It fixes, for all hardware:

- wandb losing the last steps: verl 0.6.1 calls ``wandb.finish()`` only in its tracker's
  ``__del__``, which does not run before Ray ends the TaskRunner. The queued history never
  reaches the run file (offline runs keep only the first records; the log shows
  ``socket.send() raised exception`` at exit). ``fit`` is wrapped to finish the run.

and, when the CPU overlay sets ``RLVR_CPU_COMPAT=1`` and CUDA is absent, installs
``rlvr.cpu_compat``. Keying the CPU fixes to the overlay keeps them out of GPU runs, whose
GPU-less actors (the TaskRunner) also see no CUDA.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

CPU_COMPAT_ENV = "RLVR_CPU_COMPAT"


def install() -> None:
    _finish_wandb_after_fit()
    if os.environ.get(CPU_COMPAT_ENV) == "1":
        from rlvr import cpu_compat

        cpu_compat.install()


def _finish_wandb_after_fit() -> None:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    original = RayPPOTrainer.fit
    if getattr(original, "_rlvr_finishes_wandb", False):
        return

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        finally:
            wandb = sys.modules.get("wandb")
            if wandb is not None and wandb.run is not None:
                wandb.finish()

    fit._rlvr_finishes_wandb = True
    RayPPOTrainer.fit = fit

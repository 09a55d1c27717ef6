"""Ray worker setup for every recipe run (``rlvr.train.verl_hooks.install``, Ray's setup hook).

Set in ``configs/grpo.yaml``, so it runs in each Ray worker process (TaskRunner included) before
verl's code does. It must not import torch or verl: Ray runs the hook *before* it sets the
worker's ``CUDA_VISIBLE_DEVICES`` (that happens when the actor's task starts), and
``verl.utils.device`` calls ``torch.cuda.is_available()`` at import, which would pin CUDA to
every GPU of the node and put every rank on GPU 0 (verl issue 1752). So the hook only registers
patches that run right after the module they patch is first imported, by which time Ray has
assigned the devices.

The patches:

- always: wandb losing the last steps. verl 0.6.1 calls ``wandb.finish()`` only in its tracker's
  ``__del__``, which does not run before Ray ends the TaskRunner, so queued history never
  reaches the run file. ``RayPPOTrainer.fit`` is wrapped to finish the run.
- with ``RLVR_CPU_COMPAT=1`` (set by the CPU overlays) and no CUDA: ``rlvr.cpu.compat``.
- with ``RLVR_TRACE_DIR`` set (the CPU rehearsal): one JSON line per process recording
  ``CUDA_VISIBLE_DEVICES`` at hook time and when torch is first imported, so a rehearsal can
  prove the ordering above on every rank.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

CPU_COMPAT_ENV = "RLVR_CPU_COMPAT"
TRACE_DIR_ENV = "RLVR_TRACE_DIR"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs callbacks right after a named module's code has executed, on its first import."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.callbacks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader = spec.loader
        callbacks = self.callbacks.pop(fullname)

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                for callback in callbacks:
                    callback(module)

        spec.loader = _Loader()
        return spec


_finder = _AfterImport()


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once ``name`` is imported (now, if it already is)."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    _finder.callbacks.setdefault(name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def install() -> None:
    """The setup hook. Imports neither torch nor verl (see the module docstring)."""
    if os.environ.get(TRACE_DIR_ENV):
        _trace("hook")
        after_import("torch", lambda module: _trace("torch_imported"))
    after_import("verl.trainer.ppo.ray_trainer", _finish_wandb_after_fit)
    if os.environ.get(CPU_COMPAT_ENV) == "1":
        # verl's package import pulls in torch; the CPU fixes patch both.
        after_import("verl", lambda module: _install_cpu_compat())


def _install_cpu_compat() -> None:
    from rlvr.cpu import compat as cpu_compat

    cpu_compat.install()


def _trace(event: str) -> None:
    """Append this process's device view to ``$RLVR_TRACE_DIR/<pid>.jsonl``."""
    record = {
        "event": event,
        "pid": os.getpid(),
        "time": time.time(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torch_loaded": "torch" in sys.modules,
        "rank": os.environ.get("RANK"),
        "world_size": os.environ.get("WORLD_SIZE"),
        "raylet_pid": os.environ.get("RAY_RAYLET_PID"),
        "executable": sys.executable,
    }
    path = os.path.join(os.environ[TRACE_DIR_ENV], f"{os.getpid()}.jsonl")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def _finish_wandb_after_fit(module: ModuleType) -> None:
    trainer_class = module.RayPPOTrainer
    original = trainer_class.fit
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

    fit._rlvr_finishes_wandb = True  # type: ignore[attr-defined]
    trainer_class.fit = fit

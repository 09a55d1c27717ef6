"""Ray's worker setup hook for the CPU path (``rlvr.cpu.hook.install``), set by
``configs/rehearsal/cpu.yaml`` (so by ``hardware/cpu.yaml`` and ``scripts/rehearse.sh``); GPU runs
have no hook. Ray runs it in every worker process (the TaskRunner and each verl rank) before
verl's code, which is the only way to reach the ranks' processes without subclassing verl's
workers. It must not import torch or verl: Ray runs the hook *before* it sets the worker's
``CUDA_VISIBLE_DEVICES`` (that happens when the actor's task starts), and ``verl.utils.device``
calls ``torch.cuda.is_available()`` at import, which would pin CUDA to every GPU of the node and
put every rank on GPU 0 (verl issue 1752). So it only registers callbacks that run right after
the module they need is first imported, by which time Ray has assigned the devices:

- with ``RLVR_CPU_COMPAT=1`` (the CPU overlays): ``rlvr.cpu.compat.install()`` (each fix skipped
  when CUDA is available) once verl is imported.
- with ``RLVR_TRACE_DIR`` set (the CPU rehearsal): one JSON line per process recording
  ``CUDA_VISIBLE_DEVICES`` at hook time and when torch is first imported, so a rehearsal can
  prove the ordering above on every rank.
- with ``RLVR_HIDE_GPUS=1`` (the CPU rehearsal, also on a GPU node): right after torch's first
  import, once Ray has given the rank its (fake) GPU and the trace has recorded it,
  ``CUDA_VISIBLE_DEVICES`` is blanked. torch reads it only when CUDA first initialises, so the
  rank sees no GPU and takes the CPU path on a laptop and on a GPU node alike, where the fake ids
  would otherwise name real GPUs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from types import ModuleType

import wrapt

CPU_COMPAT_ENV = "RLVR_CPU_COMPAT"
TRACE_DIR_ENV = "RLVR_TRACE_DIR"
HIDE_GPUS_ENV = "RLVR_HIDE_GPUS"


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` right after ``name``'s code has run on its first import (now, if
    it already has): wrapt's post-import hooks, which import nothing else."""
    wrapt.register_post_import_hook(callback, name)


def install() -> None:
    """The setup hook. Imports neither torch nor verl (see the module docstring)."""
    if os.environ.get(TRACE_DIR_ENV):
        _trace("hook")
        after_import("torch", lambda module: _trace("torch_imported"))
    if os.environ.get(HIDE_GPUS_ENV) == "1":
        after_import("torch", lambda module: _hide_gpus())
    if os.environ.get(CPU_COMPAT_ENV) == "1":
        # verl's package import pulls in torch; the CPU fixes patch both.
        after_import("verl", lambda module: _install_cpu_compat())


def _install_cpu_compat() -> None:
    from rlvr.cpu import compat as cpu_compat

    cpu_compat.install()


def _hide_gpus() -> None:
    """After the trace recorded Ray's assignment: no GPU for torch in this process."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if os.environ.get(TRACE_DIR_ENV):
        _trace("gpus_hidden")


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

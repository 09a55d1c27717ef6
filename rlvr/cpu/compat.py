"""Run verl 0.6.1's unmodified GRPO trainer on a machine without GPUs.

``configs/rehearsal/cpu.yaml`` (used by ``hardware/cpu.yaml`` and by ``scripts/rehearse.sh``)
sets ``RLVR_CPU_COMPAT=1`` for the Ray workers, and the setup hook every recipe runs
(``rlvr.train.verl_hooks.install``, Ray's ``worker_process_setup_hook``) then calls ``install()``
here in every worker right after verl is first imported there. Each fix is skipped when CUDA is
available, so the same environment trains on GPUs unchanged.
The configuration half of the CPU path lives in those overlays: advertised Ray GPUs (verl's
resource pool counts GPUs), SDPA attention, no remove-padding (flash-attn only), FSDP2, fp32.

Fix -> the symptom it cures:

- ``_gloo_process_groups``: ``Duplicate device type cpu in backend string: cpu:gloo,cpu:nccl``.
- ``_cpu_device_functions``: ``module 'torch.cpu' has no attribute 'get_rng_state'`` (also
  ``empty_cache``, memory statistics, ``mem_get_info``, ``manual_seed``).
- ``_no_cpu_autocast``: steps 8-40x slower, from bf16 autocast on CPUs without AMX.
- ``_shape_correct_timing_gather``: ``ProcessGroupGloo::allgather: invalid tensor size`` (a 0-d
  tensor gathered into (1,) buffers after every generation).
- ``_no_ref_offload``: ``CPU device type not an accelerator`` / ``Found no NVIDIA driver`` from
  the reference model's forced, pinned CPU offload.
- ``_register_hf_rollout``: ``Rollout hf with mode sync not found`` (0.6.1 registers only vllm
  and sglang); the rollout itself is ``rlvr.cpu.rollout.HFSyncRollout``.
"""

from __future__ import annotations

import sys
from typing import Any

HF_ROLLOUT = "rlvr.cpu.rollout.HFSyncRollout"
_installed = False


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def install() -> list[str]:
    """Apply every fix once per process when CUDA is absent; return the names applied."""
    global _installed
    if _installed or cuda_available():
        return []
    applied = []
    for fix in (
        _gloo_process_groups,
        _cpu_device_functions,
        _no_cpu_autocast,
        _shape_correct_timing_gather,
        _no_ref_offload,
        _register_hf_rollout,
    ):
        fix()
        applied.append(fix.__name__.lstrip("_"))
    _installed = True
    return applied


def _gloo_process_groups() -> None:
    """verl asks for ``cpu:gloo,<device>:nccl``; with device ``cpu`` that names cpu twice."""
    import torch.distributed as dist

    original = dist.init_process_group
    if getattr(original, "_rlvr_cpu", False):
        return

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        backend = kwargs.get("backend", args[0] if args else None)
        if isinstance(backend, str) and "nccl" in backend:
            if args:
                args = ("gloo", *args[1:])
            else:
                kwargs["backend"] = "gloo"
        return original(*args, **kwargs)

    init_process_group._rlvr_cpu = True  # type: ignore[attr-defined]
    dist.init_process_group = init_process_group


def _cpu_device_functions() -> None:
    """verl calls CUDA-style functions on ``get_torch_device()``, which is ``torch.cpu`` here."""
    import psutil
    import torch

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return memory.available, memory.total

    functions = {
        "get_rng_state": lambda device=None: torch.get_rng_state(),
        "set_rng_state": lambda state, device=None: torch.set_rng_state(state),
        "manual_seed": lambda seed: torch.manual_seed(seed),
        "manual_seed_all": lambda seed: torch.manual_seed(seed),
        "empty_cache": lambda: None,
        "memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "max_memory_reserved": lambda device=None: 0,
        "reset_peak_memory_stats": lambda device=None: None,
        "mem_get_info": mem_get_info,
    }
    for name, function in functions.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, function)


def _no_cpu_autocast() -> None:
    """verl wraps forward passes in bf16 autocast; on CPU that is slow and fp32 is what we train."""
    import torch

    if getattr(torch.autocast, "_rlvr_cpu", False):
        return
    base = torch.autocast

    class autocast(base):  # type: ignore[valid-type,misc]
        _rlvr_cpu = True

        def __init__(self, device_type: str, *args: Any, **kwargs: Any) -> None:
            if device_type == "cpu":
                kwargs["enabled"] = False
            super().__init__(device_type, *args, **kwargs)

    torch.autocast = autocast  # type: ignore[misc]


def _gather_timing(timing: float, k: int = 10) -> tuple[float, float, float]:
    """Share of ranks above the top-k percentile, and min/max of a timing across ranks."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return -1.0, -1.0, -1.0
    local = torch.tensor([timing], dtype=torch.float32)
    gathered = [torch.zeros(1, dtype=torch.float32) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    stacked = torch.cat(gathered)
    threshold = torch.quantile(stacked, 1 - k / 100)
    return (stacked > threshold).float().mean().item(), stacked.min().item(), stacked.max().item()


def _shape_correct_timing_gather() -> None:
    """verl gathers a 0-d tensor into (1,) buffers: NCCL tolerates it, gloo does not."""
    import verl.utils.profiler.performance as performance

    performance.topk_reduce_ratio_min_max = _gather_timing
    # fsdp_workers imports the name; patch its copy too if it was imported before this hook.
    workers = sys.modules.get("verl.workers.fsdp_workers")
    if workers is not None:
        workers.topk_reduce_ratio_min_max = _gather_timing  # type: ignore[attr-defined]


def _no_ref_offload() -> None:
    """verl forces the reference model's FSDP2 parameters to pinned CPU offload; on a CPU-only
    machine there is nothing to offload from and pinning needs a GPU driver.

    FSDP1 (``strategy=fsdp``) is not covered; the CPU overlay uses FSDP2.
    """
    import verl.workers.fsdp_workers as workers

    def no_offload_policy(*args: Any, **kwargs: Any) -> None:
        return None

    workers.CPUOffloadPolicy = no_offload_policy  # type: ignore[misc,assignment]


def _register_hf_rollout() -> None:
    from verl.workers.rollout import base

    base._ROLLOUT_REGISTRY[("hf", "sync")] = HF_ROLLOUT

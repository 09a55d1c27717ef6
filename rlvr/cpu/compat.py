"""Run verl 0.6.1's GRPO trainer on a machine without GPUs: the CPU path's changes to verl.

``configs/rehearsal/cpu.yaml`` (used by ``hardware/cpu.yaml`` and by ``scripts/rehearse.sh``)
sets ``RLVR_CPU_COMPAT=1`` for the Ray workers and Ray's ``worker_process_setup_hook`` to
``rlvr.cpu.hook.install``, which calls ``install()`` here in every worker right after verl is
first imported there. Each fix is skipped when CUDA is available, so the same environment
trains on GPUs unchanged.
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
- ``collectives.reduce_scatter_on_gloo``: gloo's ``reduce_scatter_tensor`` sums when asked to
  average (torch 2.8), so FSDP2 gradients on N ranks came out N times too large (under HSDP, the
  shard group's size); the rehearsal's 2-node vs 1-node check caught it (rlvr/cpu/collectives.py).
- ``_bypass_mode_config``: ``Key 'rollout_correction' is not in struct`` from verl 0.6.1's own
  ``algorithm.rollout_correction.bypass_mode``: ``apply_rollout_correction`` writes an undeclared
  key into the trainer's ``actor.policy_loss`` (verl issue 4912). Only the policy-gradient variant
  reads that key, and 0.6.1 cannot hand it to its workers (verl PR 4930), so it is refused here.

Speed (docs/TRAINING.md, "CPU speed"); none changes what is computed:

- ``_cpu_threads``: Ray starts every worker with ``OMP_NUM_THREADS=1``, so torch used one core;
  each verl rank now takes its share of the cores (``RLVR_CPU_THREADS`` overrides).
- ``_no_gc_per_rollout``: verl's ``aggressive_empty_cache`` runs ``gc.collect()`` around every
  rollout to hand cached CUDA memory back; on CPU there is none, and each took about 0.5 s.
- ``collectives.reduce_scatter_on_gloo``, ``collectives.single_rank_full_tensor``: a collective
  over one rank, copied directly (``rlvr/cpu/collectives.py`` says why).
- ``_packed_actor_forward``: the actor's and the reference's log-prob forward runs packed
  (``rlvr.cpu.packing``): each prompt once, a prefix the prompts share once, no padding, logits
  only for response tokens.
- ``_rollout_entropy_metric``: in bypass mode verl skips the old-log-prob pass and with it the
  ``actor/entropy`` metric; the actor update reports it from the rollout's per-token entropies
  (``rlvr.cpu.rollout.ROLLOUT_ENTROPY_KEY``), with the same formula.

The fixes that wrap verl functions first check their parameters and raise if verl changed them.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from rlvr.common.verl_guards import require_parameters

_require_parameters = functools.partial(require_parameters, owner="rlvr/cpu/compat.py")

HF_ROLLOUT = "rlvr.cpu.rollout.HFSyncRollout"
THREADS_ENV = "RLVR_CPU_THREADS"
applied_fixes: list[str] = []  # what install() applied in this process, in order


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def install() -> list[str]:
    """Apply every fix once per process when CUDA is absent; return the names applied."""
    from rlvr.cpu import collectives

    if applied_fixes or cuda_available():
        return []
    applied = []
    for fix in (
        _gloo_process_groups,
        _cpu_device_functions,
        _no_cpu_autocast,
        _shape_correct_timing_gather,
        _no_ref_offload,
        _register_hf_rollout,
        _bypass_mode_config,
        _cpu_threads,
        _no_gc_per_rollout,
        collectives.reduce_scatter_on_gloo,
        collectives.single_rank_full_tensor,
        _packed_actor_forward,
        _rollout_entropy_metric,
    ):
        fix()
        applied.append(fix.__name__.lstrip("_"))
    applied_fixes.extend(applied)
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


def _bypass_mode_config() -> None:
    """Let ``apply_rollout_correction`` record its config on the driver's struct config."""
    import verl.trainer.ppo.rollout_corr_helper as helper
    from omegaconf import DictConfig, open_dict

    original: Callable[..., None] = helper.apply_rollout_correction
    if getattr(original, "_rlvr_cpu", False):
        return
    _require_parameters(original, ("batch", "rollout_corr_config", "policy_loss_config"))

    @functools.wraps(original)
    def apply_rollout_correction(
        batch: Any, rollout_corr_config: Any = None, policy_loss_config: Any = None
    ) -> None:
        if rollout_corr_config is not None and rollout_corr_config.get("use_policy_gradient"):
            raise ValueError(
                "algorithm.rollout_correction.use_policy_gradient: verl 0.6.1 sets the loss mode"
                " on the driver after the workers got their config, so they would train with the"
                " PPO loss anyway; use bypass_mode with the default PPO loss"
            )
        if isinstance(policy_loss_config, DictConfig):
            with open_dict(policy_loss_config):
                return original(batch, rollout_corr_config, policy_loss_config)
        return original(batch, rollout_corr_config, policy_loss_config)

    apply_rollout_correction._rlvr_cpu = True  # type: ignore[attr-defined]
    helper.apply_rollout_correction = apply_rollout_correction


def cpu_threads(local_ranks: int) -> int:
    """Torch threads for one of ``local_ranks`` rank processes on this node: its share of the
    cores this process may run on, or ``RLVR_CPU_THREADS``."""
    explicit = os.environ.get(THREADS_ENV)
    if explicit:
        return max(1, int(explicit))
    return max(1, len(os.sched_getaffinity(0)) // max(1, local_ranks))


def _cpu_threads() -> None:
    """Ray sets ``OMP_NUM_THREADS=1`` in workers that reserve no CPU, as verl's do. Only verl's
    rank processes (``RAY_LOCAL_WORLD_SIZE`` set) compute; the TaskRunner keeps its one thread."""
    import torch

    local_ranks = os.environ.get("RAY_LOCAL_WORLD_SIZE")
    if local_ranks is not None:
        torch.set_num_threads(cpu_threads(int(local_ranks)))


def _no_gc_per_rollout() -> None:
    """``aggressive_empty_cache`` collects garbage to hand cached CUDA blocks back; on CPU that is
    only time (verl calls it around every rollout)."""
    import verl.utils.memory_utils as memory_utils
    import verl.workers.fsdp_workers as workers

    _require_parameters(memory_utils.aggressive_empty_cache, ("force_sync", "max_retries"))

    def aggressive_empty_cache(force_sync: bool = True, max_retries: int = 3) -> None:
        return None

    memory_utils.aggressive_empty_cache = aggressive_empty_cache
    workers.aggressive_empty_cache = aggressive_empty_cache


def _packed_actor_forward() -> None:
    """The actor's (and reference's) forward over padded rows, replaced by the packed one where
    that computes the same thing: no remove-padding, fused kernels, sequence parallelism or
    multi-modal inputs, SDPA attention, a model that takes ``logits_to_keep``."""
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    from rlvr.cpu import packing

    original = DataParallelPPOActor._forward_micro_batch
    if getattr(original, "_rlvr_cpu", False):
        return
    _require_parameters(original, ("self", "micro_batch", "temperature", "calculate_entropy"))

    @functools.wraps(original)
    def _forward_micro_batch(
        self: Any, micro_batch: Any, temperature: Any, calculate_entropy: bool = False
    ) -> Any:
        if _packable(self) and "multi_modal_inputs" not in micro_batch:
            result = packing.response_log_probs(
                self.actor_module, micro_batch, temperature, calculate_entropy
            )
            if result is not None:
                return result
        return original(self, micro_batch, temperature, calculate_entropy)

    _forward_micro_batch._rlvr_cpu = True  # type: ignore[attr-defined]
    DataParallelPPOActor._forward_micro_batch = _forward_micro_batch  # type: ignore[method-assign]


def _packable(actor: Any) -> bool:
    if actor.use_remove_padding or actor.use_fused_kernels or actor.use_ulysses_sp:
        return False
    module = actor.actor_module
    base = module.get_base_model() if hasattr(module, "get_base_model") else module
    sdpa = getattr(getattr(base, "config", None), "_attn_implementation", None) == "sdpa"
    return sdpa and "logits_to_keep" in inspect.signature(base.forward).parameters


def _rollout_entropy_metric() -> None:
    """``actor/entropy`` from the rollout's entropies when the update's batch carries them and
    verl's metrics lack it (in bypass mode verl computes it nowhere). Same formula as verl's
    old-log-prob pass: ``agg_loss`` of the per-token entropies with the actor's
    ``loss_agg_mode``, over this rank's batch. It wraps the recipes' actor
    (``rlvr.train.token_mean``), which reweights the mask before verl's update sees it."""
    from verl.trainer.ppo.core_algos import agg_loss

    from rlvr.cpu.rollout import ROLLOUT_ENTROPY_KEY
    from rlvr.train.token_mean import TokenMeanActor

    original = TokenMeanActor.update_policy
    if getattr(original, "_rlvr_cpu", False):
        return
    _require_parameters(original, ("self", "data"))

    @functools.wraps(original)
    def update_policy(self: Any, data: Any) -> Any:
        entropy = data.batch.get(ROLLOUT_ENTROPY_KEY, None)
        mask = data.batch.get("response_mask", None)
        metrics = original(self, data)
        if entropy is not None and mask is not None and "actor/entropy" not in metrics:
            value = agg_loss(
                loss_mat=entropy, loss_mask=mask, loss_agg_mode=self.config.loss_agg_mode
            )
            metrics["actor/entropy"] = value.item()
        return metrics

    update_policy._rlvr_cpu = True  # type: ignore[attr-defined]
    TokenMeanActor.update_policy = update_policy  # type: ignore[method-assign]

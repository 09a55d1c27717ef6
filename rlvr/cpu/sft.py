"""Run verl 0.6.1's own SFT trainer (``verl.trainer.fsdp_sft_trainer``) on a machine without GPUs.

``rlvr.train.sft`` calls ``install()`` before handing over to verl's ``main``; every fix is
skipped when CUDA is available, so the same entry point trains on GPUs unchanged. The process
group, device-function and autocast fixes are the GRPO ones (``rlvr.cpu.compat``); the SFT
trainer needs two more, because it hard-codes what the GRPO workers read from the config:

- ``_sdpa_attention``: ``FlashAttention2 has been toggled on, but it cannot be used`` (the
  trainer asks ``from_pretrained`` for ``attn_implementation="flash_attention_2"``); SDPA
  computes the same attention, as the GRPO CPU path uses (``rehearsal/cpu.yaml``).
- ``_cpu_batches``: ``Found no NVIDIA driver`` at the first batch (the trainer's data
  loaders pin memory for the device, which is CUDA's; on CPU there is nothing to pin for). Its
  loaders also start 8 worker processes each, to tokenize a few hundred rows: on a 2-core machine
  they took the cores from the first steps, so the batches are made in the trainer's process
  (the same batches: the sampler orders the rows either way). The quickstart's SFT stage took
  183-198 s instead of 212-222 s, and its model came out byte-identical.
- ``_sft_threads``: torchrun starts each rank with ``OMP_NUM_THREADS=1`` when it starts several;
  each rank takes its share of the cores instead (``RLVR_CPU_THREADS`` overrides).
- ``_fp32_fsdp2``: FSDP2's ``MixedPrecisionPolicy(param_dtype=bfloat16)`` is fixed in the
  trainer; on a CPU without native bf16 instructions bf16 matmuls are several times slower
  than fp32. Where the CPU has them (AVX512-BF16, AMX) verl's bf16 stays: on the 2-core
  AVX512-BF16 machine SmolLM2-135M's forward and backward take 1.5 s in bf16 against 2.7 s in
  fp32 (benchmarks/bench_sft_precision.py), and the quickstart's SFT phase 170 s against 265 s.
  One difference from verl on GPUs stays: with CPU autocast off the loss is taken on bf16
  logits (CUDA autocast upcasts them); the quickstart's final losses matched fp32's within 0.004.
- ``_packed_sft_loss``, unless ``RLVR_SFT_PACKED=0``: the trainer runs every row at
  ``data.max_length`` (its remove-padding needs flash-attn); ``rlvr.cpu.sft_packing``'s
  ``PackedSFTTrainer`` takes the same loss from one packed forward, without padding or the
  repeated system line. The quickstart's SFT stage took 0.86x the time
  (benchmarks/bench_sft_packing.py). ``RLVR_SFT_PACKED=0`` runs verl's padded forward instead
  (the SFT model differs from it at float rounding).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from rlvr.common.verl_guards import require_source
from rlvr.cpu.precision import native_bf16

_installed = False


def install() -> list[str]:
    """Apply every fix once per process when CUDA is absent; return the names applied."""
    from rlvr.cpu import compat

    global _installed
    if _installed or compat.cuda_available():
        return []
    fixes = cpu_fixes()
    for fix in fixes:
        fix()
    _installed = True
    return [fix.__name__.lstrip("_") for fix in fixes]


def cpu_fixes() -> tuple[Callable[[], None], ...]:
    """The fixes this machine needs, in the order they are applied."""
    from rlvr.cpu import compat

    # verl's own bf16 where the CPU computes bf16 natively; RLVR_SFT_FP32=1 forces fp32
    fp32 = not native_bf16() or os.environ.get("RLVR_SFT_FP32") == "1"
    return (
        compat._gloo_process_groups,
        compat._cpu_device_functions,
        compat._no_cpu_autocast,
        _sdpa_attention,
        _cpu_batches,
        *((_fp32_fsdp2,) if fp32 else ()),
        _sft_threads,
        *((_packed_sft_loss,) if os.environ.get("RLVR_SFT_PACKED", "1") != "0" else ()),
    )


def _require_source(function: Any, text: str) -> None:
    require_source(function, text, "update rlvr/cpu/sft.py for this verl")


def _sdpa_attention() -> None:
    """``attn_implementation="flash_attention_2"`` in ``_build_model_optimizer`` -> ``"sdpa"``."""
    from verl.trainer import fsdp_sft_trainer

    _require_source(
        fsdp_sft_trainer.FSDPSFTTrainer._build_model_optimizer,
        'attn_implementation="flash_attention_2"',
    )
    auto_model = fsdp_sft_trainer.AutoModelForCausalLM
    if getattr(auto_model, "_rlvr_cpu", False):
        return

    class AutoModelForCausalLM(auto_model):  # type: ignore[misc,valid-type]
        _rlvr_cpu = True

        @classmethod
        def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("attn_implementation") == "flash_attention_2":
                kwargs["attn_implementation"] = "sdpa"
            return auto_model.from_pretrained(*args, **kwargs)

    fsdp_sft_trainer.AutoModelForCausalLM = AutoModelForCausalLM  # type: ignore[misc]


def _fp32_fsdp2() -> None:
    """``MixedPrecisionPolicy(param_dtype=torch.bfloat16, ...)`` -> fp32 parameters."""
    import torch
    from verl.trainer import fsdp_sft_trainer

    _require_source(
        fsdp_sft_trainer.FSDPSFTTrainer._build_model_optimizer, "param_dtype=torch.bfloat16"
    )
    policy = fsdp_sft_trainer.MixedPrecisionPolicy
    if getattr(policy, "_rlvr_cpu", False):
        return

    def fp32_policy(*args: Any, **kwargs: Any) -> Any:
        kwargs["param_dtype"] = torch.float32
        return policy(*args, **kwargs)

    fp32_policy._rlvr_cpu = True  # type: ignore[attr-defined]
    fsdp_sft_trainer.MixedPrecisionPolicy = fp32_policy  # type: ignore[misc,assignment]


def _cpu_batches() -> None:
    """``StatefulDataLoader(..., num_workers=8, pin_memory=True, ...)`` -> unpinned batches made
    in the trainer's process (see the module docstring)."""
    from verl.trainer import fsdp_sft_trainer

    build = fsdp_sft_trainer.FSDPSFTTrainer._build_dataloader
    _require_source(build, "pin_memory=True")
    _require_source(build, "num_workers=8")
    loader = fsdp_sft_trainer.StatefulDataLoader
    if getattr(loader, "_rlvr_cpu", False):
        return

    class StatefulDataLoader(loader):  # type: ignore[misc,valid-type]
        _rlvr_cpu = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["pin_memory"] = False
            kwargs.pop("pin_memory_device", None)
            kwargs["num_workers"] = 0
            super().__init__(*args, **kwargs)

    fsdp_sft_trainer.StatefulDataLoader = StatefulDataLoader


def _sft_threads() -> None:
    import torch

    from rlvr.cpu.compat import cpu_threads

    torch.set_num_threads(cpu_threads(int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


def _packed_sft_loss() -> None:
    """``trainer = FSDPSFTTrainer(...)`` in ``run_sft`` -> ``PackedSFTTrainer`` (its subclass)."""
    from verl.trainer import fsdp_sft_trainer

    from rlvr.cpu.sft_packing import PackedSFTTrainer

    _require_source(fsdp_sft_trainer.run_sft, "trainer = FSDPSFTTrainer(")
    method = fsdp_sft_trainer.FSDPSFTTrainer._compute_loss_and_backward
    _require_source(method, 'loss_mask = batch.pop("loss_mask")[:, 1:]')
    _require_source(method, "loss = torch.sum(loss) / (valid_token_this_rank + 1e-8) * dp_size")
    _require_source(method, "loss = loss / n_micro_batches")
    if fsdp_sft_trainer.FSDPSFTTrainer is not PackedSFTTrainer:
        fsdp_sft_trainer.FSDPSFTTrainer = PackedSFTTrainer  # type: ignore[misc]

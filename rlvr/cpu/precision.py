"""bf16 on CPU: whether this CPU computes it natively, and which CPU-path settings ask for it.

Where the CPU has AVX512-BF16 or AMX, oneDNN's bf16 kernels run SmolLM2's forward and backward in
about half fp32's time (docs/TRAINING.md, "bf16 on CPU"); elsewhere torch emulates bf16 and it
runs several times slower than fp32. SFT takes verl's bf16 only where it is native
(``rlvr.cpu.sft``), the quickstart refuses ``--grpo_precision bf16`` elsewhere, and pre-flight
warns a ``train.sh`` run that asks for it there (``emulated_bf16_warning``).
"""

from __future__ import annotations

from typing import Any

#: The quickstart's ``--grpo_precision`` choices (scripts/quickstart.sh, its report, the seeds
#: benchmark): fp32, hardware/cpu.yaml's, or verl's GPU precision.
GRPO_PRECISIONS = ("fp32", "bf16")

#: torch.cpu's checks for the oneDNN bf16 kernels (private, but what torch's own tests use).
BF16_CHECKS = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")

_BF16_NAMES = ("bf16", "bfloat16")


def native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (oneDNN's AVX512-BF16 or AMX kernels)."""
    import torch.cpu

    return any(bool(getattr(torch.cpu, name)()) for name in BF16_CHECKS)


def bf16_settings(config: Any) -> list[str]:
    """The CPU path's settings in a composed GRPO config that compute in bf16, as ``key=value``:
    the rollout's dtype and the actor's and reference's FSDP parameter dtype. Empty for a run
    that is not on the CPU path (a vLLM rollout computes on GPUs)."""
    roles = config.actor_rollout_ref
    if roles.rollout.get("name") != "hf":
        return []
    found = []
    if str(roles.rollout.get("dtype")).lower() in _BF16_NAMES:
        found.append(f"actor_rollout_ref.rollout.dtype={roles.rollout.dtype}")
    for role in ("actor", "ref"):
        precision = (roles[role].get("fsdp_config") or {}).get("mixed_precision") or {}
        if str(precision.get("param_dtype")).lower() in _BF16_NAMES:
            key = f"actor_rollout_ref.{role}.fsdp_config.mixed_precision.param_dtype"
            found.append(f"{key}={precision.get('param_dtype')}")
    return found


def emulated_bf16_warning(config: Any) -> str | None:
    """One line when a CPU-path run asks for bf16 on a CPU that only emulates it; else None."""
    settings = bf16_settings(config)
    if not settings or native_bf16():
        return None
    return (
        f"{', '.join(settings)}: this CPU has no native bf16 (AVX512-BF16 or AMX), so bf16 runs "
        "slower than fp32 here; hardware/cpu.yaml's float32 is the fast choice"
    )

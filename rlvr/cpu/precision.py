"""bf16 on CPU: whether this CPU computes it natively, and which CPU-path settings ask for it.

Where the CPU has AVX512-BF16 or AMX, oneDNN's bf16 kernels run SmolLM2's forward and backward in
about half fp32's time (docs/TRAINING.md, "bf16 on CPU"); elsewhere torch emulates bf16 and it
runs several times slower than fp32. SFT takes verl's bf16 only where it is native
(``rlvr.cpu.sft``); so does the quickstart's GRPO by default (``--grpo_precision auto``: the
update in bf16, the rollout in fp32), it refuses a bf16 choice elsewhere, and pre-flight warns a
``train.sh`` run that asks for it there (``emulated_bf16_warning``).
"""

from __future__ import annotations

from typing import Any

#: The quickstart's ``--grpo_precision`` choices (scripts/quickstart.sh, its report, the seeds
#: benchmark): ``auto`` (``bf16_update`` where bf16 is native, else fp32), fp32
#: (hardware/cpu.yaml's), ``bf16_update`` (the actor's forward and backward in bf16 over fp32
#: weights and optimizer, the rollout in fp32), or verl's GPU precision (``bf16``: the rollout in
#: bf16 too).
AUTO = "auto"
GRPO_PRECISIONS = (AUTO, "fp32", "bf16_update", "bf16")
_ACTOR_BF16 = [
    f"actor_rollout_ref.{role}.fsdp_config.mixed_precision.param_dtype=bf16"
    for role in ("actor", "ref")  # the reference too, when a recipe has one
]
_OVERRIDES = {
    "fp32": [],
    "bf16_update": _ACTOR_BF16,
    "bf16": ["actor_rollout_ref.rollout.dtype=bfloat16", *_ACTOR_BF16],
}

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


def resolved_precision(name: str, plan: bool = False) -> str:
    """``name``, with ``auto`` decided for this CPU: ``bf16_update`` where bf16 is native, fp32
    elsewhere. Raises ``ValueError`` (one line) for a bf16 choice this CPU only emulates, unless
    ``plan`` (a dry run, which only prints what a run would set)."""
    if name not in GRPO_PRECISIONS:
        raise ValueError(f"--grpo_precision must be one of {', '.join(GRPO_PRECISIONS)}: {name}")
    if name == AUTO:
        return "bf16_update" if native_bf16() else "fp32"
    if name != "fp32" and not plan and not native_bf16():
        raise ValueError(
            f"--grpo_precision {name}: this CPU has no native bf16 (AVX512-BF16 or AMX), where "
            "bf16 runs slower than fp32"
        )
    return name


def precision_overrides(name: str) -> list[str]:
    """The plain verl keys a resolved precision sets over hardware/cpu.yaml's fp32."""
    return list(_OVERRIDES[name])


def main(argv: list[str] | None = None) -> int:
    """``python -m rlvr.cpu.precision NAME``: the resolved precision on the first line, then its
    overrides, one a line (scripts/quickstart.sh reads them); exit 2 with one line if refused."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("precision", help=f"one of {', '.join(GRPO_PRECISIONS)}")
    parser.add_argument(
        "--plan", action="store_true", help="a dry run's: do not refuse a bf16 choice here"
    )
    args = parser.parse_args(argv)
    try:
        name = resolved_precision(args.precision, plan=args.plan)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    print("\n".join([name, *precision_overrides(name)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""rlvr/cpu/precision.py: the native-bf16 check, and the CPU-path settings that ask for bf16."""

from __future__ import annotations

import pytest

from rlvr.config.compose import compose
from rlvr.cpu import precision

# What scripts/quickstart.sh --grpo_precision bf16 adds over hardware/cpu.yaml's fp32.
BF16_OVERRIDES = [
    "actor_rollout_ref.rollout.dtype=bfloat16",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=bf16",
]


def test_torch_still_has_the_bf16_checks() -> None:
    """``native_bf16`` reads private torch.cpu functions: a torch without them fails here, not by
    silently training SFT in fp32 at half the speed (or crashing at the first launch)."""
    import torch.cpu

    for name in precision.BF16_CHECKS:
        assert isinstance(getattr(torch.cpu, name)(), bool), name
    assert isinstance(precision.native_bf16(), bool)


def test_bf16_settings_name_each_bf16_key_of_the_cpu_path() -> None:
    assert precision.bf16_settings(compose("countdown_smollm2_cpu")) == []  # hardware/cpu.yaml
    found = precision.bf16_settings(compose("countdown_smollm2_cpu", BF16_OVERRIDES))
    assert found == BF16_OVERRIDES
    rollout_only = compose("countdown_smollm2_cpu", BF16_OVERRIDES[:1])
    assert precision.bf16_settings(rollout_only) == BF16_OVERRIDES[:1]


def test_a_gpu_run_is_not_the_cpu_paths_concern() -> None:
    """verl's GPU experiments compute in bf16 by design (vLLM's and FSDP's): nothing to say."""
    config = compose("countdown_qwen3_4b", BF16_OVERRIDES[:1])
    assert config.actor_rollout_ref.rollout.name == "vllm"
    assert precision.bf16_settings(config) == []


@pytest.mark.parametrize(("native", "warned"), [(False, True), (True, False)])
def test_bf16_on_an_emulating_cpu_is_one_warning_line(
    monkeypatch: pytest.MonkeyPatch, native: bool, warned: bool
) -> None:
    monkeypatch.setattr(precision, "native_bf16", lambda: native)
    warning = precision.emulated_bf16_warning(compose("countdown_smollm2_cpu", BF16_OVERRIDES))
    assert (warning is not None) is warned
    if warning is not None:
        assert "\n" not in warning and "no native bf16" in warning
        assert warning.startswith(", ".join(BF16_OVERRIDES))
    # the control: fp32, the CPU path's default, is never warned about
    assert precision.emulated_bf16_warning(compose("countdown_smollm2_cpu")) is None

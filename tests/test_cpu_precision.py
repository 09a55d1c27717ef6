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


@pytest.mark.parametrize(("native", "auto"), [(True, "bf16_update"), (False, "fp32")])
def test_auto_takes_bf16_for_the_update_only_where_it_is_native(
    monkeypatch: pytest.MonkeyPatch, native: bool, auto: str
) -> None:
    monkeypatch.setattr(precision, "native_bf16", lambda: native)
    assert precision.resolved_precision("auto") == auto
    assert precision.resolved_precision("fp32") == "fp32"
    for choice in ("bf16_update", "bf16"):
        if native:
            assert precision.resolved_precision(choice) == choice
        else:
            with pytest.raises(ValueError, match="no native bf16"):
                precision.resolved_precision(choice)
            assert precision.resolved_precision(choice, plan=True) == choice  # a dry run's plan
    with pytest.raises(ValueError, match="must be one of"):
        precision.resolved_precision("fp16")


def test_each_precision_sets_what_it_says_over_the_cpu_paths_fp32() -> None:
    """bf16_update: the actor (and reference) compute in bf16, the rollout stays fp32; bf16 is
    the quickstart's earlier set (rollout too); fp32 adds nothing."""
    assert precision.precision_overrides("fp32") == []
    assert precision.precision_overrides("bf16") == BF16_OVERRIDES
    update = compose("countdown_smollm2_cpu", precision.precision_overrides("bf16_update"))
    assert update.actor_rollout_ref.rollout.dtype == "float32"
    for role in ("actor", "ref"):
        mixed = update.actor_rollout_ref[role].fsdp_config.mixed_precision
        assert (mixed.param_dtype, mixed.reduce_dtype, mixed.buffer_dtype) == (
            "bf16",
            "fp32",
            "fp32",
        )
    assert precision.bf16_settings(update) == BF16_OVERRIDES[1:]


def test_the_cli_prints_the_choice_then_its_keys(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    assert precision.main(["auto"]) == 0
    assert capsys.readouterr().out.splitlines() == ["bf16_update", *BF16_OVERRIDES[1:]]
    monkeypatch.setattr(precision, "native_bf16", lambda: False)
    assert precision.main(["bf16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no native bf16" in err
    assert precision.main(["bf16", "--plan"]) == 0
    assert capsys.readouterr().out.splitlines() == ["bf16", *BF16_OVERRIDES]

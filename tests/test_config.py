"""Every experiment composes on verl's ppo_trainer and passes verl's own checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlvr.config import CONFIG_DIR, compose, experiments, validate

DECLARED_GPUS = {
    "countdown_cpu": 1,
    "countdown_qwen3_4b": 8,
    "countdown_qwen3_4b_lora": 8,
    "countdown_qwen3_4b_2nodes": 16,
    "gsm8k_qwen2_5_3b": 8,
}


def test_experiment_list() -> None:
    assert experiments() == sorted(DECLARED_GPUS)


@pytest.mark.parametrize("experiment", sorted(DECLARED_GPUS))
def test_composes_and_passes_verl_validation(experiment: str, tmp_path: Path) -> None:
    config = compose(experiment, root=tmp_path)
    assert config.trainer.n_gpus_per_node * config.trainer.nnodes == DECLARED_GPUS[experiment]
    validate(config)
    assert config.algorithm.adv_estimator == "grpo"
    assert "hf_model" in config.actor_rollout_ref.actor.checkpoint.save_contents
    # every path hangs off the one root, so a Ray worker's cwd never matters
    for path in (
        config.data.train_files,
        config.data.val_files,
        config.custom_reward_function.path,
        config.trainer.default_local_dir,
    ):
        assert Path(path).is_absolute() and str(path).startswith(str(tmp_path.resolve()))


def test_seed_settings() -> None:
    countdown = compose("countdown_qwen3_4b")
    assert countdown.actor_rollout_ref.actor.optim.lr == 2e-6
    assert countdown.actor_rollout_ref.rollout.n == 16
    assert countdown.actor_rollout_ref.actor.kl_loss_coef == 0.01
    assert countdown.data.train_batch_size == 64
    assert countdown.data.apply_chat_template_kwargs.enable_thinking is False
    gsm8k = compose("gsm8k_qwen2_5_3b")
    assert (gsm8k.actor_rollout_ref.actor.optim.lr, gsm8k.data.train_batch_size) == (1e-6, 32)
    assert gsm8k.data.val_files.endswith("gsm8k/val.parquet")
    lora = compose("countdown_qwen3_4b_lora")
    assert (lora.actor_rollout_ref.model.lora_rank, lora.actor_rollout_ref.actor.optim.lr) == (
        32,
        1e-4,
    )
    assert compose("countdown_qwen3_4b_2nodes").trainer.nnodes == 2


def test_verl_checks_catch_a_bad_gpu_count() -> None:
    config = compose("countdown_qwen3_4b", ["trainer.n_gpus_per_node=7"])
    with pytest.raises((AssertionError, ValueError)):
        validate(config)


def test_overrides_pass_through() -> None:
    config = compose("countdown_cpu", ["base_model=smollm2_135m", "trainer.total_training_steps=5"])
    assert config.actor_rollout_ref.model.path.endswith("artifacts/models/smollm2-135m-instruct")
    assert config.trainer.total_training_steps == 5


def test_root_is_required() -> None:
    raw = OmegaConf.load(CONFIG_DIR / "grpo.yaml")
    assert OmegaConf.is_missing(raw.paths, "root")


def test_overlay_groups_do_not_shadow_verl_groups() -> None:
    import verl.trainer.config as verl_config

    verl_groups = {p.name for p in Path(verl_config.__file__).parent.iterdir() if p.is_dir()}
    ours = {p.name for p in CONFIG_DIR.iterdir() if p.is_dir()}
    assert ours == {"task", "base_model", "hardware", "adapter"}
    assert not ours & verl_groups

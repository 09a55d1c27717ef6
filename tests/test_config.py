"""Every experiment composes on verl's ppo_trainer and passes verl's own checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlvr.train.config import CONFIG_DIR, compose, experiments, validate

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
    # LoRA writes no PEFT-keyed hf_model; the launcher merges the adapter instead
    lora = config.actor_rollout_ref.model.get("lora_rank", 0) > 0
    assert ("hf_model" in config.actor_rollout_ref.actor.checkpoint.save_contents) != lora
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
    # (with dynamic batching verl checks less: the rehearsal runs the real world size instead)
    config = compose(
        "countdown_qwen3_4b",
        ["trainer.n_gpus_per_node=7", "actor_rollout_ref.actor.use_dynamic_bsz=false"],
    )
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
    assert ours == {"task", "base_model", "hardware", "adapter", "rehearsal"}
    assert not ours & verl_groups


@pytest.mark.parametrize("experiment", [e for e in sorted(DECLARED_GPUS) if e != "countdown_cpu"])
def test_gpu_experiments_are_finite_and_disk_bounded(experiment: str) -> None:
    """a3b0be1: no step count (hub data -> ~7,600 steps) and every checkpoint kept."""
    config = compose(experiment)
    trainer = config.trainer
    assert trainer.total_training_steps or trainer.total_epochs == 1
    assert 0 < trainer.max_actor_ckpt_to_keep <= 2
    assert trainer.save_freq >= 25


def test_gpu_experiments_follow_verls_tuned_settings() -> None:
    for experiment in ("countdown_qwen3_4b", "countdown_qwen3_4b_lora", "gsm8k_qwen2_5_3b"):
        config = compose(experiment).actor_rollout_ref
        assert config.actor.use_dynamic_bsz and config.actor.ppo_max_token_len_per_gpu >= 16384
        assert config.rollout.tensor_model_parallel_size == 1
        assert config.actor.strategy == config.ref.strategy == "fsdp2"
    two_nodes = compose("countdown_qwen3_4b_2nodes").actor_rollout_ref
    assert two_nodes.actor.fsdp_config.fsdp_size == 8  # shard within a node, replicate across
    assert two_nodes.ref.fsdp_config.fsdp_size == 8


def test_rehearsal_overlay_keeps_the_world_size_and_batches() -> None:
    real = compose("countdown_qwen3_4b")
    rehearsed = compose("countdown_qwen3_4b", ["+rehearsal=cpu"])
    for key in (
        "trainer.n_gpus_per_node",
        "trainer.nnodes",
        "data.train_batch_size",
        "actor_rollout_ref.rollout.n",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "actor_rollout_ref.actor.use_dynamic_bsz",
        "actor_rollout_ref.actor.strategy",
        "actor_rollout_ref.actor.checkpoint.save_contents",
    ):
        assert OmegaConf.select(rehearsed, key) == OmegaConf.select(real, key), key
    assert rehearsed.actor_rollout_ref.rollout.name == "hf"
    assert rehearsed.ray_kwargs.ray_init.runtime_env.env_vars.RLVR_CPU_COMPAT == "1"

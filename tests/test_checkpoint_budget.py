"""Checkpoint disk budget: verl's step, save and rotation rules, and bytes per checkpoint."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr.config.compose import compose, experiments
from rlvr.planning.checkpoint_budget import (
    ModelSize,
    checkpoints_saved,
    estimate,
    max_kept,
    model_size,
    safetensors_size,
    training_steps,
)

QWEN3_4B = 4022468096  # rlvr/models/architectures.py, Qwen/Qwen3-4B-Instruct-2507
QWEN3_4B_LORA_PER_RANK = 2064384
# What the GPU experiments set; given explicitly so the arithmetic does not move with them.
SCHEDULE = [
    "trainer.total_training_steps=100",
    "trainer.save_freq=25",
    "trainer.max_actor_ckpt_to_keep=2",
]


def write_rows(path: Path, rows: int) -> Path:
    """A Parquet with ``rows`` rows: only its metadata's row count is read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"i": list(range(rows))}), path)
    return path


def test_full_fine_tuning_bytes(tmp_path: Path) -> None:
    budget = estimate(compose("countdown_qwen3_4b", SCHEDULE, root=tmp_path))
    assert (budget.steps, budget.saved, budget.kept) == (100, 4, 2)  # saves at 25, 50, 75, 100
    # fp32 model shards 4 + AdamW moments 8 + fp32 hf_model 4 = 16 bytes per parameter.
    assert budget.per_checkpoint == 16 * QWEN3_4B == 64_359_489_536
    assert budget.merged == 0
    assert budget.needed == 128_718_979_072
    assert budget.directory == tmp_path.resolve() / "artifacts/checkpoints/countdown_qwen3_4b"


def test_hsdp_replicas_each_save_the_sharded_state(tmp_path: Path) -> None:
    """2 nodes x 8 with fsdp_size 8: a (2, 8) mesh whose two replicas both write model and
    optimizer shards; rank 0 alone writes hf_model."""
    budget = estimate(compose("countdown_qwen3_4b_2nodes", SCHEDULE, root=tmp_path))
    # 2 replicas x (fp32 shards 4 + AdamW 8) + fp32 hf_model 4 = 28 bytes per parameter
    assert budget.per_checkpoint == 28 * QWEN3_4B == 112_629_106_688
    assert budget.replicas == 2 and "each of 2 HSDP replicas" in budget.line()
    one_mesh = compose(
        "countdown_qwen3_4b_2nodes",
        [*SCHEDULE, "actor_rollout_ref.actor.fsdp_config.fsdp_size=-1"],
        root=tmp_path,
    )
    assert estimate(one_mesh).per_checkpoint == 16 * QWEN3_4B  # sharded over all 16: one copy


@pytest.mark.parametrize(
    ("contents", "per_checkpoint"),
    [
        # shards 4*(P + 32L) + AdamW on the adapters 8*32L + lora_adapter 4*32L
        # = 4*4_022_468_096 + 16*66_060_288
        ("[model,optimizer,extra]", 17_146_836_992),
        # plus hf_model 4*(P + 32L) = 16_354_113_536
        ("[model,optimizer,extra,hf_model]", 33_500_950_528),
    ],
)
def test_lora_bytes(tmp_path: Path, contents: str, per_checkpoint: int) -> None:
    overrides = [*SCHEDULE, f"actor_rollout_ref.actor.checkpoint.save_contents={contents}"]
    budget = estimate(compose("countdown_qwen3_4b_lora", overrides, root=tmp_path))
    assert budget.kept == 2
    assert budget.per_checkpoint == per_checkpoint
    # rlvr.train.lora_merge gives each kept checkpoint a bf16 merged model.
    assert budget.merged == 2 * QWEN3_4B == 8_044_936_192
    assert budget.needed == 2 * (per_checkpoint + 8_044_936_192)


def test_steps_from_epochs_drop_the_last_partial_batch(tmp_path: Path) -> None:
    train = write_rows(tmp_path / "train.parquet", 103)

    def steps(*overrides: str) -> tuple[int | None, bool]:
        base = [
            f"data.train_files={train}",
            "data.train_batch_size=32",
            "trainer.total_epochs=2",
            "trainer.total_training_steps=null",
        ]
        return training_steps(compose("gsm8k_qwen2_5_3b", base + list(overrides)))

    assert steps() == (6, True)  # 103 // 32 = 3 batches x 2 epochs
    assert steps("data.train_max_samples=64") == (4, True)
    assert steps("trainer.total_training_steps=5") == (5, True)
    # More steps than the epochs hold: fit stops at 6 without ever reaching its last step.
    assert steps("trainer.total_training_steps=100") == (6, False)
    budget = estimate(
        compose("gsm8k_qwen2_5_3b", [f"data.train_files={train}", "trainer.save_freq=2"])
    )
    assert (budget.steps, budget.saved) == (3, 2)  # one epoch of 3 batches: steps 2 and 3


def test_saves_follow_fit() -> None:
    assert checkpoints_saved(100, 25, True) == 4
    assert checkpoints_saved(10, 4, True) == 3  # 4, 8 and the last step, 10
    assert checkpoints_saved(10, 4, False) == 2
    assert checkpoints_saved(10, 0, True) == 0
    assert checkpoints_saved(10, -1, True) == 0


def test_rotation_limit_as_verl_reads_it(tmp_path: Path) -> None:
    def kept(*overrides: str) -> int | None:
        return max_kept(compose("countdown_cpu", list(overrides), root=tmp_path))

    assert kept("trainer.max_actor_ckpt_to_keep=null") is None
    assert kept("trainer.max_actor_ckpt_to_keep=0") is None  # verl: <= 0 keeps all
    assert kept("trainer.max_actor_ckpt_to_keep=3") == 3
    assert kept("+trainer.remove_previous_ckpt_in_save=true") == 1
    # Without a step count the limit still bounds the checkpoints on disk; without both, unknown.
    unbounded = ["trainer.total_training_steps=null", "trainer.max_actor_ckpt_to_keep=null"]
    budget = estimate(compose("countdown_cpu", unbounded, root=tmp_path))
    assert budget.kept is None and budget.needed is None
    assert any("checkpoint count unknown" in w for w in budget.warnings)


def test_safetensors_headers_count_the_real_model(tiny_model_dir: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    size = safetensors_size(tiny_model_dir)
    assert size is not None
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
    assert size.parameters == sum(p.numel() for p in model.parameters())  # tied: counted once
    lora = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear"))
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert size.lora_params_per_rank is not None
    assert 8 * size.lora_params_per_rank == trainable


def test_local_safetensors_win_over_the_config_json(tiny_model_dir: Path, tmp_path: Path) -> None:
    config = compose(
        "countdown_cpu", [f"actor_rollout_ref.model.path={tiny_model_dir}"], root=tmp_path
    )
    size = safetensors_size(tiny_model_dir)
    assert size is not None
    assert model_size(config) == size
    # countdown_cpu: fp32, hf_model saved, one checkpoint (step 2 of 2).
    assert estimate(config).per_checkpoint == 16 * size.parameters


@pytest.mark.parametrize(
    ("hub_id", "parameters"),
    [("Qwen/Qwen2.5-1.5B-Instruct", 1_543_714_304), ("Qwen/Qwen2.5-0.5B-Instruct", 494_032_768)],
)
def test_a_model_override_resizes_the_budget(tmp_path: Path, hub_id: str, parameters: int) -> None:
    """The size follows ``actor_rollout_ref.model.path`` as the command line leaves it, never the
    experiment's own model (before the architectures table keyed it, the 3B's declared size
    stayed: 49.4 GB of disk for a 1.5B run)."""
    three_b = compose("gsm8k_qwen2_5_3b", SCHEDULE, root=tmp_path)
    other = compose(
        "gsm8k_qwen2_5_3b", [*SCHEDULE, f"actor_rollout_ref.model.path={hub_id}"], root=tmp_path
    )
    size = model_size(other)
    assert size is not None and size.parameters == parameters
    assert model_size(three_b) == ModelSize(
        3_085_938_688, 1_870_848, "rlvr/models/architectures.py"
    )
    # Full fine-tuning, fp32 shards + AdamW moments + an hf_model copy: 16 bytes a parameter.
    assert estimate(other).per_checkpoint == 16 * parameters != estimate(three_b).per_checkpoint


def test_a_model_the_table_lacks_names_where_to_add_it(tmp_path: Path) -> None:
    config = compose(
        "gsm8k_qwen2_5_3b", ["actor_rollout_ref.model.path=org/unknown-7b"], root=tmp_path
    )
    budget = estimate(config)
    assert budget.per_checkpoint is None
    assert any(
        "org/unknown-7b" in w and "rlvr/models/architectures.py" in w for w in budget.warnings
    )


def test_gpu_experiments_have_a_bounded_budget(tmp_path: Path) -> None:
    """Finite steps with data present, and a kept count bounded by the config alone."""
    # Composed once each (composition dominates this test's time); estimate() only reads.
    configs = {e: compose(e, root=tmp_path) for e in experiments()}
    gpu = {e: c for e, c in configs.items() if int(c.trainer.n_gpus_per_node) > 1}
    assert gpu
    # Every experiment without data first: experiments of one task share the train file.
    without_data = {e: estimate(c) for e, c in gpu.items()}
    for experiment, config in gpu.items():
        kept = without_data[experiment].kept
        assert kept is not None, f"{experiment}: kept checkpoints grow with the data"
        write_rows(Path(str(config.data.train_files)), 7473)  # GSM8K's train size
        budget = estimate(config)
        assert budget.steps is not None, experiment
        assert budget.kept is not None and budget.kept <= kept, experiment
        assert budget.needed is not None, f"{experiment}: parameter count unknown"

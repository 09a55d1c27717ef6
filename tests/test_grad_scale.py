"""verl's own actor update, under each experiment's batching, against a gradient computed here."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.config.compose import compose, experiments
from rlvr.rehearsal import grad_scale


@pytest.mark.parametrize("experiment", experiments())
def test_every_experiment_updates_with_the_whole_gradient(
    experiment: str, tiny_model_dir: Path
) -> None:
    result = grad_scale.check(compose(experiment), tiny_model_dir)
    assert result.ok, result.line()
    assert result.micro_batches >= 3  # the row-weighted micro batch sum is exercised


@pytest.mark.parametrize(
    ("experiment", "expected"),
    [("countdown_qwen3_4b", 0.25), ("countdown_qwen3_4b_2nodes", 0.5), ("gsm8k_qwen2_5_3b", 0.125)],
)
def test_verls_default_mini_batch_shrinks_the_gradient(
    experiment: str, expected: float, tiny_model_dir: Path
) -> None:
    """Negative control: the settings the GPU experiments had (verl's default mini batch 256)
    shrink verl's own actor's gradient; the recipes' actor takes the token mean of the rows."""
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    config = compose(experiment, ["actor_rollout_ref.actor.ppo_mini_batch_size=256"])
    result = grad_scale.check(config, tiny_model_dir, actor_class=DataParallelPPOActor)
    assert not result.ok
    assert result.ratios == pytest.approx([expected], rel=1e-4)
    assert grad_scale.check(config, tiny_model_dir).ok


def test_several_updates_per_batch_and_fixed_micro_batches(tiny_model_dir: Path) -> None:
    """4 mini batches per batch, with and without dynamic batching: every step's gradient whole."""
    four = ["actor_rollout_ref.actor.ppo_mini_batch_size=16"]
    fixed = [
        *four,
        "actor_rollout_ref.actor.use_dynamic_bsz=false",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    ]
    for overrides in (four, fixed):
        result = grad_scale.check(compose("countdown_qwen3_4b", overrides), tiny_model_dir)
        assert result.ok and len(result.ratios) == 4, result.line()

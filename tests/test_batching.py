"""Every experiment's batch arithmetic keeps verl's gradient scale right (train/batching.py)."""

from __future__ import annotations

import pytest

from rlvr.config.batching import Batching, batching
from rlvr.config.compose import compose, experiments


@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("experiment", experiments())
def test_every_experiment_takes_whole_mini_batches(experiment: str, dynamic: bool) -> None:
    """Whatever use_dynamic_bsz says: verl checks mini <= batch only without it."""
    config = compose(experiment, [f"actor_rollout_ref.actor.use_dynamic_bsz={dynamic}"])
    actor, world = (
        config.actor_rollout_ref.actor,
        config.trainer.nnodes * config.trainer.n_gpus_per_node,
    )
    assert actor.ppo_mini_batch_size <= config.data.train_batch_size
    assert actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n % world == 0
    assert batching(config).problems() == []


def test_verls_default_mini_batch_is_refused() -> None:
    """The planted regression: verl's default 256 against a batch of 64 (negative control)."""
    config = compose("countdown_qwen3_4b", ["actor_rollout_ref.actor.ppo_mini_batch_size=256"])
    (problem,) = batching(config).problems()
    assert "actor.ppo_mini_batch_size 256 > data.train_batch_size 64" in problem
    assert "sum to 0.25, not 1" in problem


def test_the_arithmetic() -> None:
    plan = Batching(train_batch=64, mini_batch=16, group_size=16, data_parallel=8, epochs=1)
    assert (plan.rows_per_rank, plan.mini_rows_per_rank, plan.updates_per_batch) == (128, 32, 4)
    assert plan.line() == (
        "64 prompts x 16 a batch, 4 update(s) of 16 prompts (32 rows on each of 8 ranks)"
    )
    assert Batching(64, 64, 16, 16, 2).updates_per_batch == 2
    uneven = Batching(train_batch=64, mini_batch=3, group_size=5, data_parallel=8, epochs=1)
    assert [p.split(" ")[0] for p in uneven.problems()] == [
        "data.train_batch_size",  # 64 is not a multiple of 3
        "actor_rollout_ref.actor.ppo_mini_batch_size",  # 3 x 5 = 15 rows over 8 ranks
    ]


def test_world_size_and_sequence_parallel() -> None:
    config = compose("countdown_qwen3_4b_2nodes")
    assert batching(config).data_parallel == 16
    assert batching(config, world_size=8).data_parallel == 8
    sp = compose("countdown_qwen3_4b", ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"])
    assert batching(sp).data_parallel == 4

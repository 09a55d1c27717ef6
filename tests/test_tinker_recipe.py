"""rlvr/tinker/recipe.py: one typed, validating read of a Tinker experiment's settings, which
pre-flight and the run share: the shipped recipe reads as its config says, and every value it
cannot train with is refused in one line naming its key, all of them in one pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.config.compose import compose
from rlvr.tinker.preflight import tinker_problems
from rlvr.tinker.recipe import RecipeError, TinkerRecipe

EXPERIMENT = "countdown_qwen3_4b_tinker"


def test_the_shipped_recipe_reads_as_its_config_says() -> None:
    recipe = TinkerRecipe.from_config(compose(EXPERIMENT))
    assert (recipe.model, recipe.lora_rank, recipe.learning_rate) == (
        "Qwen/Qwen3-4B-Instruct-2507", 32, 1e-4,
    )  # fmt: skip
    assert (recipe.batch_prompts, recipe.group_size, recipe.max_tokens) == (64, 16, 2048)
    assert (recipe.steps, recipe.save_freq, recipe.test_freq) == (100, 25, 10)
    assert (recipe.loss_fn, recipe.sample_ahead, recipe.drop_constant) == (
        "importance_sampling", True, True,
    )  # fmt: skip
    assert (recipe.temperature, recipe.val_temperature) == (1.0, 0.0)
    assert (recipe.project, recipe.loggers) == ("rlvr-recipes", ("console", "wandb", "file"))
    assert recipe.val_generations == 8 and recipe.val_max_samples == 256
    assert recipe.run_dir.name == EXPERIMENT and recipe.metrics_path.parent == recipe.run_dir
    assert recipe.resolved["trainer"]["experiment_name"] == EXPERIMENT  # wandb's run config
    assert (recipe.max_retries, recipe.backoff_s, recipe.request_timeout_s) == (4, 2.0, 600.0)


BAD = {
    "actor_rollout_ref.model.lora_rank=0": "actor_rollout_ref.model.lora_rank=0: must be a "
    "whole number >= 1 (Tinker trains LoRA adapters only)",
    "actor_rollout_ref.rollout.n=1": "actor_rollout_ref.rollout.n=1: a group of one has no "
    "spread; set n >= 2",
    "actor_rollout_ref.actor.optim.lr=0": "actor_rollout_ref.actor.optim.lr=0: must be a finite "
    "number > 0",
    "data.max_response_length=abc": "data.max_response_length=abc: must be a whole number >= 1",
    "trainer.total_training_steps=null": "trainer.total_training_steps=None: must be a whole "
    "number >= 1",
    "tinker.loss_fn=ppo": "tinker.loss_fn=ppo: the Tinker loop builds importance_sampling",
    "algorithm.adv_estimator=gae": "algorithm.adv_estimator=gae: the Tinker loop computes grpo, "
    "grpo_drop_constant",
    "tinker.sample_ahead=maybe": "tinker.sample_ahead=maybe: must be true or false",
    "tinker.max_retries=-1": "tinker.max_retries=-1: must be a whole number >= 0",
    "tinker.request_timeout_s=inf": "tinker.request_timeout_s=inf: must be a finite number > 0",
    "trainer.logger=7": "trainer.logger=7: must be a list of names",
}


def test_every_bad_value_is_one_line_naming_its_key_all_in_one_pass() -> None:
    with pytest.raises(RecipeError) as refused:
        TinkerRecipe.from_config(compose(EXPERIMENT, list(BAD)))
    assert sorted(refused.value.problems) == sorted(BAD.values())


@pytest.mark.parametrize("override", list(BAD))
def test_each_bad_value_alone_is_its_one_line(override: str) -> None:
    with pytest.raises(RecipeError) as refused:
        TinkerRecipe.from_config(compose(EXPERIMENT, [override]))
    assert refused.value.problems == [BAD[override]]


def test_preflight_lists_the_recipes_problems_before_connecting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pre-flight reads the same recipe: its refusals, then the local ones, and no request (the
    endpoint is a closed port that would be a problem of its own)."""
    monkeypatch.setenv("TINKER_BASE_URL", "http://127.0.0.1:9")
    config = compose(EXPERIMENT, ["tinker.loss_fn=ppo", f"paths.checkpoints={tmp_path}"])
    assert tinker_problems(config, ["local"]) == [BAD["tinker.loss_fn=ppo"], "local"]

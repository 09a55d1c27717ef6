"""rlvr/tinker/run_folder.py's adapter record and rlvr/tinker/train.py's ``finished``: a rerun
of a run trained to its last step, whose adapter is already downloaded, sends nothing; any
doubt (no record, another step's, an unreadable one, no folder) fetches it again. Against the
real server, with the requests counted: test_tinker_e2e."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.config.compose import compose
from rlvr.tinker.recipe import TinkerRecipe
from rlvr.tinker.run_folder import (
    ADAPTER_DIR,
    ADAPTER_RECORD,
    Checkpoint,
    adapter_step,
    record_adapter,
    record_checkpoint,
)
from rlvr.tinker.train import finished


def test_the_record_says_which_steps_adapter_the_folder_holds(tmp_path: Path) -> None:
    assert adapter_step(tmp_path) is None  # nothing downloaded
    (tmp_path / ADAPTER_DIR).mkdir()
    assert adapter_step(tmp_path) is None  # a folder without a record: fetch again
    record_adapter(tmp_path, 3, "tinker://run/sampler_weights/x_adapter_3")
    assert adapter_step(tmp_path) == 3
    (tmp_path / ADAPTER_RECORD).write_text('{"step": "3"}')
    assert adapter_step(tmp_path) is None
    (tmp_path / ADAPTER_RECORD).write_text('{"step": 3')  # torn
    assert adapter_step(tmp_path) is None


@pytest.fixture
def recipe(tmp_path: Path) -> TinkerRecipe:
    config = compose("countdown_qwen3_4b_tinker", [f"paths.checkpoints={tmp_path}",
                     "trainer.experiment_name=r", "trainer.total_training_steps=3"])  # fmt: skip
    return TinkerRecipe.from_config(config)


def test_finished_only_at_the_last_step_with_its_adapter(recipe: TinkerRecipe) -> None:
    run = recipe.run_dir
    saved = lambda step: Checkpoint(step, f"tinker://s/{step}", recipe.model, recipe.lora_rank)  # noqa: E731
    assert not finished(recipe)  # a new run
    record_checkpoint(run, saved(2))
    (run / ADAPTER_DIR).mkdir()
    record_adapter(run, 2, "tinker://a/2")
    assert not finished(recipe)  # stopped before its last step
    record_checkpoint(run, saved(3))
    assert not finished(recipe)  # trained, the adapter not yet fetched (the negative control)
    record_adapter(run, 3, "tinker://a/3")
    assert finished(recipe)
    (run / ADAPTER_DIR).rmdir()
    assert not finished(recipe)  # the adapter folder removed by hand: fetched again

"""An experiment file is the recipe (issue 39): a plain text edit of one knob's line in one
experiment changes that experiment's composed config, and no other experiment's."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from rlvr.train.config import CONFIG_DIR, experiments

# The knob's line (its key, at any indent) and the new value written there.
EDITS = {
    "actor_rollout_ref.actor.optim.lr": ("lr", "3.3e-7"),
    "actor_rollout_ref.rollout.n": ("n", "5"),
    "data.max_response_length": ("max_response_length", "333"),
    "custom_reward_function.reward_kwargs.format_score": ("format_score", "0.05"),
}


def edit_line(path: Path, key: str, value: str) -> None:
    """Replace the value on the one line that sets ``key`` (a test failure if it is not one)."""
    lines = path.read_text().splitlines(keepends=True)
    pattern = re.compile(rf"^(\s+{re.escape(key)}:)\s*[^\s#]+(.*)$", re.DOTALL)
    hits = [i for i, line in enumerate(lines) if pattern.match(line)]
    assert len(hits) == 1, f"{path.name}: {len(hits)} lines set {key}"
    lines[hits[0]] = pattern.sub(rf"\g<1> {value}\g<2>", lines[hits[0]])
    path.write_text("".join(lines))


def compose_all(config_dir: Path, root: Path) -> dict[str, dict[str, Any]]:
    """Every experiment composed from ``config_dir`` as Hydra composes it, resolved."""
    from hydra import compose, initialize_config_dir

    composed = {}
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        for experiment in experiments():
            config = compose(config_name=experiment, overrides=[f"paths.root={root}"])
            container = OmegaConf.to_container(config, resolve=True)
            assert isinstance(container, dict)
            composed[experiment] = {str(k): v for k, v in container.items()}
    return composed


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return compose_all(CONFIG_DIR, tmp_path_factory.mktemp("root"))


@pytest.mark.parametrize("experiment", experiments())
def test_one_line_edits_move_only_that_experiment(
    experiment: str, originals: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    copy = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, copy)
    for key, value in EDITS.values():
        edit_line(copy / f"{experiment}.yaml", key, value)
    root = Path(originals[experiment]["paths"]["root"])
    edited = compose_all(copy, root)
    for dotted, (_, value) in EDITS.items():
        new = OmegaConf.select(OmegaConf.create(edited[experiment]), dotted)
        old = OmegaConf.select(OmegaConf.create(originals[experiment]), dotted)
        assert new == float(value) != old, (experiment, dotted)
    for other in experiments():
        if other != experiment:
            assert edited[other] == originals[other], f"editing {experiment} changed {other}"


def test_the_edit_is_seen_when_it_lands_in_a_shared_overlay(tmp_path: Path) -> None:
    """The control: the same kind of edit in a file two experiments share (hardware/a100x8.yaml)
    moves both, which the check above would catch."""
    copy = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, copy)
    edit_line(copy / "hardware/a100x8.yaml", "gpu_memory_utilization", "0.55")
    root = tmp_path / "root"
    before, after = compose_all(CONFIG_DIR, root), compose_all(copy, root)
    moved = {e for e in experiments() if before[e] != after[e]}
    assert {"countdown_qwen3_4b", "countdown_qwen3_4b_lora"} <= moved

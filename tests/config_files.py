"""The experiments' YAML files read as files, without composing them: which overlay each picks
and what that overlay sets. Cheap enough for module level (test modules parametrize over
GPU_EXPERIMENTS at collection, on every xdist worker); composing all eight took 3-4 s there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlvr.config.compose import CONFIG_DIR, experiments


def overlay(name: str) -> DictConfig:
    """An overlay file (``group/name``) merged with what its own `defaults` list, as Hydra does."""
    raw = OmegaConf.load(CONFIG_DIR / f"{name}.yaml")
    assert isinstance(raw, DictConfig)
    entries = list(raw.pop("defaults", []))
    merged: Any = OmegaConf.create()
    for entry in entries if "_self_" in entries else [*entries, "_self_"]:
        if entry == "_self_":
            part = raw
        else:
            part = overlay(entry[1:] if entry.startswith("/") else f"{Path(name).parent}/{entry}")
        merged = OmegaConf.merge(merged, part)
    return merged


def choices(experiment: str) -> dict[str, str]:
    """The overlay an experiment picks in each group, from its `defaults` list (a null pick,
    base_model's, is no choice)."""
    defaults = OmegaConf.load(CONFIG_DIR / f"{experiment}.yaml").defaults
    return {
        str(group): str(name)
        for entry in defaults
        if isinstance(entry, DictConfig)
        for group, name in entry.items()
        if name is not None
    }


def is_gpu(experiment: str) -> bool:
    return (
        overlay(f"hardware/{choices(experiment)['hardware']}").actor_rollout_ref.rollout.name
        != "hf"
    )


GPU_EXPERIMENTS = [e for e in experiments() if is_gpu(e)]

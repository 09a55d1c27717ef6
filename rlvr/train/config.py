"""Compose the project's Hydra experiments outside a launcher, and run verl's own checks on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.common.paths import CONFIG_DIR

VERL_CONFIGS = "pkg://verl.trainer.config"


def experiments() -> list[str]:
    """Names of the runnable experiments (top-level YAML files except the base)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if p.stem != "grpo")


def _task_search_path() -> list[str]:
    """Config roots of registered tasks kept outside configs/ (a plugin, a test's own task):
    with them on Hydra's search path, ``task=NAME`` finds their overlays."""
    from rlvr import tasks

    extra = sorted({str(s.config_dir) for s in tasks.all_specs() if s.config_dir != CONFIG_DIR})
    if not extra:
        return []
    return [f"hydra.searchpath=[{','.join([VERL_CONFIGS, *(f'file://{d}' for d in extra)])}]"]


def compose(
    experiment: str, overrides: list[str] | None = None, root: str | Path | None = None
) -> Any:
    """The experiment's full config as the launcher would build it (``paths.root`` set)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    root_override = [f"paths.root={Path(root or CONFIG_DIR.parent).resolve()}"]
    root_override += _task_search_path()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return hydra_compose(
            config_name=experiment, overrides=root_override + list(overrides or [])
        )


def validate(config: Any) -> None:
    """verl 0.6.1's own checks: ``validate_config`` (actor dataclass included) and the rollout one.

    Raises whatever verl raises (AssertionError/ValueError) for an inconsistent config.
    """
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    OmegaConf.resolve(config)
    use_reference_policy = bool(
        config.algorithm.use_kl_in_reward or config.actor_rollout_ref.actor.use_kl_loss
    )
    validate_config(config, use_reference_policy=use_reference_policy, use_critic=False)
    # (HFModelConfig is not checked here: building it loads the model's config and tokenizer.)
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)

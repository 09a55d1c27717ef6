"""The pinned stack imports together: these catch a broken lock before any training run does."""

from __future__ import annotations

import importlib.metadata as md


def test_verl_trainer_imports() -> None:
    # transformers 5 breaks this import (AutoModelForVision2Seq was removed).
    import verl.trainer.main_ppo  # noqa: F401


def test_project_packages_import() -> None:
    import rewards
    import rewards.countdown
    import rewards.gsm8k
    import rlvr  # noqa: F401

    assert rewards.countdown.compute_score
    assert rewards.gsm8k.compute_score


def test_pins() -> None:
    assert md.version("verl") == "0.6.1"
    assert md.version("torch").split("+")[0] == "2.8.0"
    assert int(md.version("transformers").split(".")[0]) < 5
    assert int(md.version("numpy").split(".")[0]) < 2
    for name in ("ray", "hydra-core", "pandas", "pyarrow", "wandb", "datasets", "tensordict"):
        assert md.version(name)

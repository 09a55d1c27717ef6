"""The pinned stack imports together: these catch a broken lock before any training run does."""

from __future__ import annotations

import importlib.metadata as md

from packaging.requirements import Requirement


def test_verl_trainer_imports() -> None:
    # transformers 5 breaks this import (AutoModelForVision2Seq was removed).
    import verl.trainer.main_ppo  # noqa: F401


def test_pins() -> None:
    assert md.version("verl") == "0.6.1"
    assert md.version("torch").split("+")[0] == "2.8.0"
    assert int(md.version("transformers").split(".")[0]) < 5
    assert int(md.version("numpy").split(".")[0]) < 2


def test_installed_versions_satisfy_the_project_requirements() -> None:
    """Every runtime requirement (ray, hydra-core, tensordict, ...) is installed at a version the
    project allows: a stale or hand-edited environment fails here, not inside a run."""
    wrong = []
    for line in md.requires("rlvr-recipes") or []:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # an optional extra (gpu)
        installed = md.version(requirement.name)
        if not requirement.specifier.contains(installed.split("+")[0], prereleases=True):
            wrong.append(f"{requirement.name} {installed} (wanted {requirement.specifier})")
    assert not wrong, wrong

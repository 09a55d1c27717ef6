"""scripts/build_model.py never deletes what it did not build, and replaces a folder only with a
finished build."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_model", ROOT / "scripts/build_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_build(model: str, folder: Path) -> None:
    (folder / "config.json").write_text(model)


def test_a_folder_that_is_not_a_model_is_kept_without_force(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setattr(script, "_build", _fake_build)
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    assert script.main(["tiny", "--out", str(mine)]) == 2
    assert "--out" in capsys.readouterr().err and (mine / "notes.txt").read_text() == "precious"
    assert script.main(["tiny", "--out", str(mine), "--force"]) == 0  # control: asked for
    assert not (mine / "notes.txt").exists() and (mine / "config.json").exists()


def test_an_existing_model_is_kept_and_an_empty_folder_filled(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(script, "_build", _fake_build)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert script.main(["tiny", "--out", str(empty)]) == 0
    (empty / "config.json").write_text("mine")
    assert script.main(["tiny", "--out", str(empty)]) == 0
    assert (empty / "config.json").read_text() == "mine"


def test_an_interrupted_rebuild_leaves_the_old_model(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "model"
    old.mkdir()
    (old / "config.json").write_text("old")

    def broken(model: str, folder: Path) -> None:
        (folder / "config.json").write_text("half")
        raise KeyboardInterrupt

    monkeypatch.setattr(script, "_build", broken)
    with pytest.raises(KeyboardInterrupt):
        script.main(["tiny", "--out", str(old), "--force"])
    assert (old / "config.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging left behind


def test_the_real_tiny_build(script: ModuleType, tmp_path: Path) -> None:
    assert script.main(["tiny", "--out", str(tmp_path / "tiny")]) == 0
    assert (tmp_path / "tiny" / "config.json").is_file()

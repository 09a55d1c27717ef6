"""scripts/build_model.py never deletes what it did not build, and replaces a folder only with a
finished build."""

from __future__ import annotations

import importlib.util
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from test_files import unwritable_folder

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
    assert script.main(["tiny", "--out", str(old), "--force"]) == 130
    assert (old / "config.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging left behind


def test_the_real_tiny_build(script: ModuleType, tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        assert script.main(["tiny", "--out", str(tmp_path / "tiny")]) == 0
    finally:
        os.umask(mask)
    assert (tmp_path / "tiny" / "config.json").is_file()
    # mkdtemp's 0700 and safetensors' 0600 would lock everyone else out
    assert stat.S_IMODE((tmp_path / "tiny").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "tiny" / "model.safetensors").stat().st_mode) == 0o644


def _old_model(folder: Path) -> None:
    folder.mkdir()
    (folder / "config.json").write_text("old")
    (folder / "model.safetensors").write_text("old weights")


@pytest.mark.parametrize(
    "signum, delay_s",
    [
        (signal.SIGINT, 0.0),
        (signal.SIGTERM, 0.5),
        # the other signal at each moment, in the full suite (each a fresh interpreter)
        pytest.param(signal.SIGTERM, 0.0, marks=pytest.mark.slow),
        pytest.param(signal.SIGINT, 1.5, marks=pytest.mark.slow),
    ],
)
def test_a_signal_mid_build_leaves_old_or_new_never_partial(
    tmp_path: Path, signum: int, delay_s: float
) -> None:
    """A real build interrupted once its staging folder exists (plus a delay): the target is
    the old model or the complete new one, and no staging or set-aside folder is left."""
    target = tmp_path / "model"
    _old_model(target)
    command = [sys.executable, str(ROOT / "scripts/build_model.py"), "tiny", "--force"]
    proc = subprocess.Popen(
        [*command, "--out", str(target)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".model.partial-*")) and proc.poll() is None:
        assert time.monotonic() < deadline, "the build never started staging"
        time.sleep(0.02)
    time.sleep(delay_s)
    if proc.poll() is None:
        os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=120)
    # -signum: the signal came after the build returned, once Python's default handlers were
    # back; the build was then complete (checked below).
    assert proc.returncode in (0, 130, -signum), err
    if proc.returncode == 130:
        assert err.strip().endswith("is as it was before this build")
    if proc.returncode == -signum:
        assert (target / "config.json").read_text() != "old"
    names = sorted(p.name for p in target.iterdir())
    if (target / "config.json").read_text() == "old":
        assert names == ["config.json", "model.safetensors"]
    else:  # the new model, whole
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(names)
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # nothing staged or set aside


def test_bad_out_is_refused_in_one_line(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setattr(script, "_build", _fake_build)
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    assert script.main(["tiny", "--out", str(a_file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and a_file.read_text() == "mine"


def _not_called(model: str, folder: Path) -> None:
    raise AssertionError("the build ran before the refusal")


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
def test_a_symlink_out_is_refused_before_the_build(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, force: list[str]
) -> None:
    """A dangling link made the swap fail after the build (NotADirectoryError); a live one was
    replaced by --force and left behind as .NAME.replaced-PID."""
    monkeypatch.setattr(script, "_build", _not_called)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    target = tmp_path / "target"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    live = tmp_path / "live"
    live.symlink_to(target)
    for link in (dangling, live):
        assert script.main(["tiny", "--out", str(link), *force]) == 2
        err = capsys.readouterr().err
        assert (
            err == f"error: --out {link}: is a symbolic link (to {os.readlink(link)}); pass "
            "the folder itself\n"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "live", "target"]
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


def test_a_symlink_to_a_model_is_kept_without_force(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: nothing is written through a link to a built model, so it is simply kept."""
    monkeypatch.setattr(script, "_build", _not_called)
    _old_model(tmp_path / "model")
    (tmp_path / "link").symlink_to(tmp_path / "model")
    assert script.main(["tiny", "--out", str(tmp_path / "link")]) == 0


def test_an_out_in_a_read_only_folder_is_refused_before_the_build(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setattr(script, "_build", _not_called)
    out = unwritable_folder(tmp_path) / "model"
    assert script.main(["tiny", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out {out}: cannot write in") and err.count("\n") == 1


def test_force_over_a_file_leaves_no_set_aside_copy(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(script, "_build", _fake_build)
    (tmp_path / "out").write_text("a file")
    assert script.main(["tiny", "--out", str(tmp_path / "out"), "--force"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and (tmp_path / "out").is_dir()


def test_the_built_folder_and_weights_are_readable_by_others(
    script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mkdtemp makes the staging folder 0700 and safetensors saves weights 0600: published,
    they get what mkdir/open give under the umask."""
    monkeypatch.setattr(script, "_build", _fake_build)
    mask = os.umask(0o022)
    try:
        assert script.main(["tiny", "--out", str(tmp_path / "m")]) == 0
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "m").stat().st_mode) == 0o755

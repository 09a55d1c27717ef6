"""Atomic writes: the target changes only when the whole write succeeded."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from rlvr.common.files import (
    output_folder_problem,
    staged,
    staged_dir,
    write_json_atomic,
    write_text_atomic,
)


def test_writes_replace_the_target(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    write_text_atomic(tmp_path / "t.md", "x\n")
    assert (tmp_path / "t.md").read_text() == "x\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json", "t.md"]


def test_a_failed_write_leaves_the_old_file_and_no_staging(tmp_path: Path) -> None:
    target = tmp_path / "rows.parquet"
    target.write_text("old")
    with pytest.raises(RuntimeError), staged(target) as staging:
        staging.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["rows.parquet"]
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "new.json", {"not": object()})
    assert not (tmp_path / "new.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["rows.parquet"]


def test_read_safetensors_header(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    from rlvr.common.files import read_safetensors_header

    save_file({"w": torch.zeros(2, 3)}, tmp_path / "m.safetensors")
    header = read_safetensors_header(tmp_path / "m.safetensors")
    assert header["w"]["shape"] == [2, 3]
    (tmp_path / "bad.safetensors").write_bytes(b"\x01")
    with pytest.raises(ValueError, match="no safetensors header"):
        read_safetensors_header(tmp_path / "bad.safetensors")


# --- staged: a unique staging name ------------------------------------------------------------


def test_staged_never_touches_a_users_file_of_the_old_staging_name(tmp_path: Path) -> None:
    mine = tmp_path / ".rows.json.tmp"  # the fixed name staging used to take, then delete
    mine.write_text("precious")
    write_text_atomic(tmp_path / "rows.json", "new")
    assert mine.read_text() == "precious" and (tmp_path / "rows.json").read_text() == "new"


def test_two_writers_to_one_path_do_not_share_a_staging_file(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    with staged(target) as first, staged(target) as second:
        assert first != second
        first.write_text("first")
        second.write_text("second")  # would have overwritten the first writer's half
    assert target.read_text() == "first"  # the outer block renames last: whole, not mixed
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_staged_files_and_folders_get_plain_permissions(tmp_path: Path) -> None:
    """mkstemp/mkdtemp make 0600/0700: a published output would be unreadable by others."""
    write_text_atomic(tmp_path / "a.txt", "x")
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o666 & ~_umask()
    with staged_dir(tmp_path / "model") as staging:
        (staging / "config.json").write_text("{}")
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o777 & ~_umask()
    (tmp_path / "model").chmod(0o750)  # a replaced folder keeps its own mode
    with staged_dir(tmp_path / "model") as staging:
        pass
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o750


# --- staged_dir / swap_in: whatever the destination is, no old copy is left ------------------


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_dangling_symlink_destination_is_swapped_not_crashed_on(tmp_path: Path) -> None:
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere")
    with staged_dir(link) as staging:
        (staging / "config.json").write_text("new")
    assert not link.is_symlink() and (link / "config.json").read_text() == "new"
    assert _names(tmp_path) == ["out"]  # no staging, no set-aside link


def test_a_symlink_or_file_destination_is_replaced_and_its_target_kept(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "mine.txt").write_text("precious")
    link = tmp_path / "link"
    link.symlink_to(target)
    with staged_dir(link) as staging:
        (staging / "config.json").write_text("new")
    assert not link.is_symlink() and _names(link) == ["config.json"]
    assert (target / "mine.txt").read_text() == "precious"  # the link went, not its target
    a_file = tmp_path / "file"
    a_file.write_text("old")
    with staged_dir(a_file) as staging:
        (staging / "config.json").write_text("new")
    assert _names(tmp_path) == ["file", "link", "target"]  # no .NAME.replaced-PID left


def test_an_interrupt_during_the_swap_still_removes_the_old_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT arriving during the swap is held back, then raised: the new folder is in place
    and the old one is deleted before it, never left as .NAME.replaced-PID."""
    destination = tmp_path / "model"
    destination.mkdir()
    (destination / "config.json").write_text("old")
    real_replace = os.replace

    def signalled_replace(source: object, target: object) -> None:
        if ".replaced-" in str(target):  # the swap's first rename: the old folder set aside
            os.kill(os.getpid(), signal.SIGINT)
        real_replace(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", signalled_replace)
    with pytest.raises(KeyboardInterrupt), staged_dir(destination) as staging:
        (staging / "config.json").write_text("new")
    assert (destination / "config.json").read_text() == "new"
    assert _names(tmp_path) == ["model"]


def test_a_copy_left_by_a_killed_run_is_removed_by_the_next(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    stale = tmp_path / f".model.replaced-{int(dead.stdout)}"
    (stale / "sub").mkdir(parents=True)
    alive = tmp_path / f".model.replaced-{os.getppid()}"  # a running process's: not ours to take
    alive.mkdir()
    other = tmp_path / ".other.replaced-1"  # another output's
    other.mkdir()
    with staged_dir(tmp_path / "model") as staging:
        (staging / "config.json").write_text("new")
    assert _names(tmp_path) == [alive.name, other.name, "model"]


# --- output_folder_problem: refused before any work ------------------------------------------


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder nothing can be created in: a 0555 folder, or for root (whom permissions do not
    stop) a read-only pseudo file system; skips when there is none."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    for candidate in (Path("/sys"), Path("/proc")):
        try:
            os.rmdir(tempfile.mkdtemp(dir=candidate))
        except OSError:
            return candidate
    pytest.skip("running as root with no read-only folder to write in")


def test_output_folder_problems(tmp_path: Path) -> None:
    assert output_folder_problem(tmp_path / "new" / "deeper", "--out") is None
    assert _names(tmp_path) == []  # the write check leaves nothing
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    live = tmp_path / "live"
    live.symlink_to(tmp_path)
    for link in (dangling, live):
        problem = output_folder_problem(link, "--out")
        assert problem is not None and problem.startswith(f"--out {link}: is a symbolic link")
    (tmp_path / "file").write_text("x")
    problem = output_folder_problem(tmp_path / "file" / "out", "--local_dir")
    assert (
        problem == f"--local_dir {tmp_path / 'file' / 'out'}: {tmp_path / 'file'} is not a folder"
    )
    locked = unwritable_folder(tmp_path)
    problem = output_folder_problem(locked / "out", "--out")
    assert problem is not None and problem.startswith(f"--out {locked / 'out'}: cannot write in")


@pytest.fixture
def sigint_after_mkdtemp(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tempfile.mkdtemp`` makes its folder, then SIGINT arrives before it returns."""
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp_then_signal(*args: object, **kwargs: object) -> str:
        folder = real_mkdtemp(*args, **kwargs)  # type: ignore[call-overload]
        os.kill(os.getpid(), signal.SIGINT)
        return folder

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp_then_signal)


@pytest.mark.usefixtures("sigint_after_mkdtemp")
def test_a_signal_during_the_write_check_leaves_no_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT right after the write check's probe is made (a SIGTERM there left a probe folder
    in CI once, mid data prep): the interrupt arrives, the folder is left as it was. The probe
    is an unnamed file, whatever the moment; the fixture interrupts a folder probe, this a file
    one (the negative control: the earlier mkdtemp probe fails this)."""
    real_temporary_file = tempfile.TemporaryFile

    def temporary_file_then_signal(*args: Any, **kwargs: Any) -> Any:
        made = real_temporary_file(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return made

    monkeypatch.setattr(tempfile, "TemporaryFile", temporary_file_then_signal)
    with pytest.raises(KeyboardInterrupt):
        output_folder_problem(tmp_path / "out", "--out")
    assert _names(tmp_path) == []


@pytest.mark.usefixtures("sigint_after_mkdtemp")
def test_a_signal_as_the_staging_folder_is_created_leaves_nothing(tmp_path: Path) -> None:
    """SIGINT delivered the moment the staging folder exists (what a CI run caught with a real
    build: ``.model.partial-*`` left behind): the block never runs and nothing stays."""
    destination = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt), staged_dir(destination):
        pytest.fail("the block must not run once the signal has arrived")
    assert list(tmp_path.iterdir()) == []


def test_writable_folder_problem_allows_a_folder_to_create_and_refuses_what_cannot_hold_files(
    tmp_path: Path,
) -> None:
    from rlvr.common.files import writable_folder_problem

    afile = tmp_path / "afile"
    afile.write_text("x")
    assert writable_folder_problem(tmp_path, "--out") is None
    assert writable_folder_problem(tmp_path / "new" / "deeper", "--out") is None
    assert not (tmp_path / "new").exists()  # the check creates nothing
    assert "is not a folder" in str(writable_folder_problem(afile, "--out"))
    assert "is not a folder" in str(writable_folder_problem(afile / "sub", "--out"))
    assert "cannot write in /proc" in str(writable_folder_problem("/proc/rlvr-x", "--out"))

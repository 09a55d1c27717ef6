"""Writes that never leave a half-written file (stage beside the target, then rename over it),
disk full turned into one line that names the path and the bytes, output-folder checks made
before any work, and a torch-free read of a safetensors file's header."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Re-exported: the one place every writer and command takes disk-full handling from.
from rlvr.common.disk_full import DISK_FULL_EXIT as DISK_FULL_EXIT
from rlvr.common.disk_full import DiskFullError as DiskFullError
from rlvr.common.disk_full import disk_full_message as disk_full_message
from rlvr.common.disk_full import disk_full_of as disk_full_of
from rlvr.common.disk_full import disk_full_translated as disk_full_translated
from rlvr.common.disk_full import is_disk_full as is_disk_full
from rlvr.common.disk_full import report_disk_full as report_disk_full
from rlvr.common.disk_full import tree_size
from rlvr.common.signals import signals_deferred


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_mode(existing: Path, folder: bool) -> int:
    """The permissions a new file or folder replacing ``existing`` gets: the old one's (a real
    file or folder, not a symlink), else what ``open``/``mkdir`` would give under the umask.
    ``mkstemp``/``mkdtemp`` make 0600/0700, which would lock everyone else out."""
    if not existing.is_symlink() and (existing.is_dir() if folder else existing.is_file()):
        return existing.stat().st_mode & 0o7777
    return (0o777 if folder else 0o666) & ~_umask()


def widen_to_umask(*paths: Path) -> None:
    """Give each path at least what a plain ``mkdir``/``open`` would under the umask: savers
    that stage through ``mkstemp`` (safetensors writes model weights so) leave 0600 files that
    no one else can read. No bits are removed; symlinks are skipped; nothing is recursed into."""
    mask = _umask()
    for path in paths:
        if path.is_symlink():
            continue
        wanted = (0o777 if path.is_dir() else 0o666) & ~mask
        mode = path.stat().st_mode & 0o7777
        if mode | wanted != mode:
            os.chmod(path, mode | wanted)


@contextmanager
def staged(path: Path, needed_bytes: int | None = None) -> Iterator[Path]:
    """A temporary path beside ``path``, moved onto it only if the block finishes.

    The name is unique (``.NAME.XXXXXXXX.tmp``), so a user's own ``.NAME.tmp`` is never touched
    and two writers to one path do not share a staging file (the last rename wins, whole). A
    full disk raises :class:`DiskFullError` naming ``path`` (``needed_bytes``, when the caller
    knows the size, else what was staged before the write failed).
    """
    staging: Path | None = None
    try:
        with disk_full_translated(path, needed_bytes, lambda: tree_size(staging)):
            handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.close(handle)
            staging = Path(name)
            os.chmod(staging, new_mode(path, folder=False))
            yield staging
            os.replace(staging, path)
    finally:
        if staging is not None:
            staging.unlink(missing_ok=True)


def remove_path(path: Path) -> None:
    """Delete what ``path`` names without following it: a symlink or file is unlinked (never its
    target), a folder removed with its contents. Nothing there is fine."""
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def swap_in(new: Path, destination: Path, aside: Path) -> Path | None:
    """Move folder ``new`` onto ``destination``; an existing destination (a symlink, dangling or
    not, is moved itself, never its target) is first renamed to ``aside`` (returned; None when
    there was nothing) and put back if the second move fails."""
    moved = None
    with signals_deferred():  # Ctrl-C between the renames would leave no destination at all
        if os.path.lexists(destination):
            os.replace(destination, aside)
            moved = aside
        try:
            os.replace(new, destination)
        except BaseException:
            if moved is not None:
                os.replace(moved, destination)
            raise
    return moved


def aside_name(destination: Path) -> Path:
    """Where :func:`replace_folder` moves the old ``destination`` while it swaps."""
    return destination.with_name(f".{destination.name}.replaced-{os.getpid()}")


def replace_folder(new: Path, destination: Path) -> None:
    """Move folder ``new`` onto ``destination`` and delete the old one, all with SIGINT/SIGTERM
    held back: a signal during the swap is delivered only once the old copy is gone, so it can
    never stay behind as ``.NAME.replaced-PID`` (a SIGKILL can: the next run removes it)."""
    with signals_deferred():
        aside = swap_in(new, destination, aside_name(destination))
        if aside is not None:
            remove_path(aside)


def remove_stale_asides(destination: Path) -> None:
    """Delete the ``.NAME.replaced-PID`` copies that a process killed mid-swap left beside
    ``destination``: only those of processes that no longer run (the name is ours alone)."""
    pattern = re.compile(rf"\.{re.escape(destination.name)}\.replaced-(\d+)")
    try:
        siblings = list(destination.parent.iterdir())
    except OSError:
        return
    for sibling in siblings:
        match = pattern.fullmatch(sibling.name)
        if match and int(match.group(1)) != os.getpid() and not _running(int(match.group(1))):
            remove_path(sibling)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's process (or not a pid): leave its folder alone
    return True


@contextmanager
def staged_dir(destination: Path, needed_bytes: int | None = None) -> Iterator[Path]:
    """A fresh folder beside ``destination``, moved onto it whole only if the block finishes.

    An existing ``destination`` is replaced only then (the caller decides whether it may be:
    see ``--force`` in the CLIs); an interrupted block leaves it as it was. The new folder gets
    the old one's permissions, or a plain ``mkdir``'s. A full disk raises
    :class:`DiskFullError` naming ``destination``, once the staging folder is gone.
    """
    destination.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_asides(destination)
    staging: Path | None = None
    try:
        with disk_full_translated(destination, needed_bytes, lambda: tree_size(staging)):
            # Held, so a signal cannot land between the folder's creation and this function
            # knowing its name (the folder would stay behind); delivered once ``staging`` is set.
            with signals_deferred():
                staging = Path(
                    tempfile.mkdtemp(prefix=f".{destination.name}.partial-", dir=destination.parent)
                )
            os.chmod(staging, new_mode(destination, folder=True))
            yield staging
            replace_folder(staging, destination)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def output_folder_problem(path: str | os.PathLike[str], flag: str) -> str | None:
    """Why ``path`` cannot be an output folder that is staged beside it and swapped in (None
    when it can): it is a symlink (the swap would replace the link, or write through it to
    somewhere else), or the folder it goes in cannot be created or written. Commands call this
    before any expensive work; the message names ``flag``."""
    target = Path(os.path.abspath(path))
    if target.is_symlink():
        return (
            f"{flag} {path}: is a symbolic link (to {os.readlink(target)}); pass the folder itself"
        )
    return _write_problem(target.parent, path, flag)


def writable_folder_problem(path: str | os.PathLike[str], flag: str) -> str | None:
    """Why files cannot be written into the folder ``path`` (None when they can): it is not a
    folder, or it (or, when it does not exist yet, the first folder above it, where it would be
    created) takes no new file. For commands that write files into a folder rather than swap
    the folder itself (that is ``output_folder_problem``)."""
    return _write_problem(Path(os.path.abspath(path)), path, flag)


def _write_problem(folder: Path, path: str | os.PathLike[str], flag: str) -> str | None:
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent  # the first folder that exists: the others are created
    if not folder.is_dir():
        return f"{flag} {path}: {folder} is not a folder"
    # A real write, not os.access: that says yes to root on read-only mounts like /sys. An
    # unnamed file (O_TMPFILE on Linux: it never has a name in the folder), so a signal at any
    # moment leaves nothing behind; a named probe folder was left once by a SIGTERM in CI.
    try:
        tempfile.TemporaryFile(prefix=".rlvr-write-check-", dir=folder).close()
    except OSError as exc:
        return f"{flag} {path}: cannot write in {folder} ({exc.strerror or type(exc).__name__})"
    return None


def write_text_atomic(path: Path, text: str) -> None:
    with staged(path, needed_bytes=len(text.encode())) as staging:
        staging.write_text(text)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """A safetensors file's JSON header (8-byte length, then JSON), without its tensor data:
    tensor name -> dtype/shape/offsets, plus ``__metadata__``. Raises OSError or ValueError."""
    with path.open("rb") as handle:
        try:
            (size,) = struct.unpack("<Q", handle.read(8))
        except struct.error as exc:
            raise ValueError(f"no safetensors header ({exc})") from exc
        if size > 100_000_000:
            raise ValueError(f"header of {size} bytes")
        header = json.loads(handle.read(size))
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    return header

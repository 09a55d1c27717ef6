"""A full disk as one line: which path, about how many bytes it needs, how much is free.

Every writer of the project raises :class:`DiskFullError` for a full disk (the staging writers
in ``rlvr.common.files`` do it for their callers), and every command prints it as one line and
exits 1 (:func:`report_disk_full`), instead of a pyarrow, torch or safetensors traceback.
``rlvr.common.files`` re-exports all of this.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# Libraries that wrap the OS error keep only its text: pyarrow ("[errno 28] No space left on
# device"), safetensors ("I/O error: No space left on device (os error 28)").
DISK_FULL_TEXTS = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))
# torch.save drops the errno: "PytorchStreamWriter failed writing file data/0: file write
# failed" (caffe2/serialize/inline_container.cc); it counts when the filesystem is nearly full.
TORCH_WRITE_FAILED = "file write failed"
NEARLY_FULL_BYTES = 1 << 20
DISK_FULL_EXIT = 1  # not 2: the input was fine, the machine ran out of room


def human_bytes(n: int) -> str:
    """Decimal units, as disks are sold and ``df -H`` prints."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def free_bytes(directory: Path) -> int:
    """Free space for an unprivileged writer on the nearest existing ancestor of ``directory``."""
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    stats = os.statvfs(probe)
    return stats.f_bavail * stats.f_frsize


def tree_size(path: Path | None) -> int | None:
    """Bytes in the file or folder ``path`` (None when there is nothing to measure)."""
    if path is None:
        return None
    try:
        if not path.is_dir():
            return path.stat().st_size
        return sum(
            os.lstat(os.path.join(folder, name)).st_size
            for folder, _, names in os.walk(path)
            for name in names
        )
    except OSError:
        return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then its cause or context, and theirs (a context hidden by ``from None`` ends
    the chain: whoever raised that decided the cause did not matter)."""
    seen: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and not any(link is other for other in seen):
        seen.append(link)
        yield link
        if link.__cause__ is not None:
            link = link.__cause__
        else:
            link = None if link.__suppress_context__ else link.__context__


def _disk_full_errno(exc: BaseException) -> int | None:
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in DISK_FULL_ERRNOS:
            return link.errno
        text = str(link)
        for code, wording in zip((errno.ENOSPC, errno.EDQUOT), DISK_FULL_TEXTS, strict=True):
            if wording in text:
                return code
    return None


def is_disk_full(exc: BaseException, path: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``exc`` (or an exception in its chain) is the disk, or the quota, running full:
    errno ENOSPC or EDQUOT, or a library's error whose message quotes the OS's wording. With
    ``path`` (where the write went), torch.save's errno-less "file write failed" counts when
    that filesystem has under 1 MiB free."""
    if _disk_full_errno(exc) is not None:
        return True
    if path is None or not any(TORCH_WRITE_FAILED in str(link) for link in _chain(exc)):
        return False
    try:
        return free_bytes(Path(path)) < NEARLY_FULL_BYTES
    except OSError:
        return False


def disk_full_message(
    path: str | os.PathLike[str],
    needed_bytes: int | None,
    written_bytes: int | None = None,
    quota: bool = False,
    free_before: int | None = None,
) -> str:
    """One line: ``disk full writing PATH: needs about 1.2 GB, 300.0 MB free on that filesystem
    (free space, then rerun)``. Without ``needed_bytes`` it gives the least the write needs:
    what was written before it failed, or what was free when it started (``free_before``),
    whichever is more. The free space is measured now."""
    if needed_bytes:
        need = f"needs about {human_bytes(needed_bytes)}"
    elif free_before and free_before > (written_bytes or 0):
        need = f"needs more than the {human_bytes(free_before)} free when it started"
    elif written_bytes:
        need = f"needs more than the {human_bytes(written_bytes)} written before it failed"
    else:
        need = "needs more room than is free"
    if quota:  # the filesystem's free space says nothing about the quota
        return f"disk quota exceeded writing {path}: {need} (free space under it, then rerun)"
    try:
        free = f", {human_bytes(free_bytes(Path(path)))} free on that filesystem"
    except OSError:
        free = ""
    return f"disk full writing {path}: {need}{free} (free space, then rerun)"


class DiskFullError(OSError):
    """The disk (or the quota) filled up writing ``path``. An OSError with errno ENOSPC or
    EDQUOT, so ``except OSError`` handlers still catch it; ``str()`` is the one-line message,
    its free space measured when the message is made (in a command: after the staging files
    were removed, so it says what a rerun will find)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        needed_bytes: int | None = None,
        written_bytes: int | None = None,
        code: int = errno.ENOSPC,
        free_before: int | None = None,
    ) -> None:
        super().__init__(code, os.strerror(code), os.fspath(path))
        self.path = Path(path)
        self.needed_bytes = needed_bytes
        self.written_bytes = written_bytes
        self.free_before = free_before

    def __str__(self) -> str:
        quota = self.errno == errno.EDQUOT
        return disk_full_message(
            self.path, self.needed_bytes, self.written_bytes, quota, self.free_before
        )

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:  # crosses Ray's process boundary
        fields = (self.needed_bytes, self.written_bytes, self.errno, self.free_before)
        return type(self), (self.path, *fields)


def disk_full_of(
    exc: BaseException, path: str | os.PathLike[str] | None = None
) -> DiskFullError | None:
    """``exc`` as a DiskFullError: the first in its chain, else a new one naming ``path`` (or
    the file the OS error names); None when ``exc`` is not a full disk."""
    for link in _chain(exc):
        if isinstance(link, DiskFullError):
            return link
    if not is_disk_full(exc, path):
        return None
    named = next(
        (link.filename for link in _chain(exc) if isinstance(link, OSError) and link.filename),
        None,
    )
    code = _disk_full_errno(exc) or errno.ENOSPC
    return DiskFullError(path if path is not None else named or "an output file", code=code)


@contextmanager
def disk_full_translated(
    path: str | os.PathLike[str],
    needed_bytes: int | None = None,
    written: Callable[[], int | None] = lambda: None,
) -> Iterator[None]:
    """A full disk inside the block becomes a DiskFullError naming ``path`` (an inner one that
    named a staging file is renamed too): ``needed_bytes`` when the caller knows what the write
    needs, else the least it needs: ``written()``, what was written before it failed, or the
    free space measured on entry."""
    try:
        free_before: int | None = free_bytes(Path(path))
    except OSError:
        free_before = None
    try:
        yield
    except Exception as exc:
        if not is_disk_full(exc, path):
            raise
        code = _disk_full_errno(exc) or errno.ENOSPC
        raise DiskFullError(path, needed_bytes, written(), code, free_before) from exc


def report_disk_full(exc: Exception, path: str | os.PathLike[str] | None = None) -> int:
    """For a command's last ``except Exception``: print a full disk as one line on stderr and
    return the exit code (1); any other exception is raised again."""
    full = disk_full_of(exc, path)
    if full is None:
        raise exc
    print(f"error: {full}", file=sys.stderr)
    return DISK_FULL_EXIT

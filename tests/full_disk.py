"""Run a command against a real full disk: a tmpfs of a given size, mounted at a path inside an
unprivileged user and mount namespace (``unshare --user --map-root-user --mount``), where a
write past its size fails with ENOSPC as on a full disk. Only the command sees the mount; what
it left there is listed before the namespace (and the tmpfs) goes away.

Where user namespaces are not permitted (some containers and CI runners), the tests that need
one are skipped, saying so; the probe runs once per session.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# $1 size, $2 mount point, $3 folder whose contents are copied in first (or ""), $4 the file
# that receives the listing of what is left; then the command. Exit 99/98: the set-up failed.
_SCRIPT = """
mount -t tmpfs -o size="$1" tmpfs "$2" || exit 99
if [ -n "$3" ]; then cp -a "$3"/. "$2"/ || exit 98; fi
mount_point=$2; listing=$4; shift 4
"$@"; status=$?
cd "$mount_point" || exit 98
(find . -mindepth 1 -type d -printf '%p/\n' && find . -type f -exec sha256sum {} +) > "$listing"
exit $status
"""


@dataclass(frozen=True)
class FullDiskRun:
    returncode: int
    stdout: str
    stderr: str
    left: list[str]  # what the disk holds afterwards, sorted: "./folder/", "SHA256  ./file"

    @property
    def last_line(self) -> str:
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else ""


def listing(folder: Path | None) -> list[str]:
    """``folder``'s contents as ``FullDiskRun.left`` lists them (nothing for None)."""
    if folder is None:
        return []
    return sorted(
        f"./{path.relative_to(folder)}/"
        if path.is_dir()
        else f"{hashlib.sha256(path.read_bytes()).hexdigest()}  ./{path.relative_to(folder)}"
        for path in folder.rglob("*")
    )


@functools.cache
def namespace_problem() -> str | None:
    """Why a tmpfs cannot be mounted in a user namespace here, or None when it can."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    with tempfile.TemporaryDirectory() as folder:
        probe = ["sh", "-c", 'mount -t tmpfs -o size=4k tmpfs "$1"', "sh", folder]
        done = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", *probe],
            capture_output=True,
            text=True,
            timeout=60,
        )
    if done.returncode != 0:
        return f"unprivileged user namespaces are not permitted here: {done.stderr.strip()}"
    return None


def run_on_full_disk(
    mount: Path,
    size: str,
    argv: Sequence[str],
    *,
    seed: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> FullDiskRun:
    """Run ``argv`` from the repository root with a ``size`` tmpfs (``64k``, ``1m``) mounted
    at ``mount`` and holding a copy of ``seed``'s contents; the test is skipped where user
    namespaces are not permitted."""
    problem = namespace_problem()
    if problem is not None:
        pytest.skip(problem)
    mount.mkdir(parents=True, exist_ok=True)
    left_file = mount.parent / f".{mount.name}.left"
    done = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            _SCRIPT,
            "sh",
            size,
            str(mount),
            str(seed or ""),
            str(left_file),
            *argv,
        ],
        cwd=ROOT,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode not in (98, 99), f"the full disk was not set up: {done.stderr}"
    left = sorted(left_file.read_text().splitlines()) if left_file.exists() else []
    return FullDiskRun(done.returncode, done.stdout, done.stderr, left)

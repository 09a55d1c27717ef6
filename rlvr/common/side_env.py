"""A pinned environment beside the project's, built once with uv and cached: for a tool whose
pins cannot share the project's (TuFT's server for the Tinker tests, TRL for its benchmark).

It lives under ``~/.cache/rlvr-recipes/<name>-<hash of its pins>`` (or the path in an override
variable), so an edit to the pins builds a new one; a marker written last makes a half-built one
be built again. torch is not installed into it: the project's torch is reached through a .pth
file placed after the environment's own packages, so no second torch is downloaded.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

READY_MARKER = ".rlvr-ready"
INSTALL_TIMEOUT_S = 1200


def side_env_dir(name: str, pins: bytes, override_var: str) -> Path:
    """Where the environment named ``name`` with these pins lives (``override_var`` wins)."""
    digest = hashlib.sha256(pins).hexdigest()[:12]
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlvr-recipes"
    return Path(os.environ.get(override_var, root / f"{name}-{digest}"))


def is_built(venv: Path) -> bool:
    return (venv / READY_MARKER).is_file()


def ensure_side_env(venv: Path, installs: Sequence[Sequence[str]], label: str) -> Path:
    """The environment at ``venv``, built when missing or half built (each of ``installs`` is
    the arguments of one ``uv pip install``); returns its python."""
    python = venv / "bin" / "python"
    if not is_built(venv):
        print(f"== {label}: building {venv}", flush=True)
        commands = [["uv", "venv", "--quiet", "--clear", "--python", sys.executable, str(venv)]]
        commands += [["uv", "pip", "install", "--quiet", "--python", str(python), *arguments]
                     for arguments in installs]  # fmt: skip
        for command in commands:
            subprocess.run(command, check=True, timeout=INSTALL_TIMEOUT_S)
        (venv / READY_MARKER).write_text(label + "\n")
    # The project's torch, after the environment's own packages; rewritten each time, since
    # another checkout may share this environment.
    own = subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True,
        timeout=120,
    ).strip()
    (Path(own) / "zz_rlvr_project_torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python

"""TRL's own environment for benchmarks/bench_grpo_vs_trl.py, built once and cached.

The packages are benchmarks/trl_requirements.txt, every one pinned, installed with ``uv pip
install --no-deps`` into ``~/.cache/rlvr-recipes/trl-<version>-<hash of that file>`` (or
``RLVR_TRL_ENV``); a marker written last makes a half-built one be built again (as
tests/tuft_server.py builds TuFT's). torch is not in the file: the project's torch is reached
through a .pth file placed after the environment's own packages, so no second torch is downloaded.
Runs on the project's python; imports nothing outside the standard library.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parent / "trl_requirements.txt"
TRL_VERSION = "0.24.0"
READY_MARKER = ".rlvr-ready"
INSTALL_TIMEOUT_S = 1200


def env_dir() -> Path:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlvr-recipes"
    return Path(os.environ.get("RLVR_TRL_ENV", root / f"trl-{TRL_VERSION}-{digest}"))


def ensure_env() -> Path:
    """TRL's environment, built when missing or half built; returns its python."""
    venv = env_dir()
    python = venv / "bin" / "python"
    if not (venv / READY_MARKER).is_file():
        print(f"== TRL environment: building {venv} ({REQUIREMENTS.name})", flush=True)
        subprocess.run(
            ["uv", "venv", "--quiet", "--clear", "--python", sys.executable, str(venv)],
            check=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        subprocess.run(
            ["uv", "pip", "install", "--quiet", "--no-deps", "--python", str(python),
             "-r", str(REQUIREMENTS)],
            check=True,
            timeout=INSTALL_TIMEOUT_S,
        )  # fmt: skip
        (venv / READY_MARKER).write_text(f"trl=={TRL_VERSION}\n")
    # torch (and its own dependencies) from the project's environment, after TRL's packages;
    # rewritten each time: another checkout may share this environment.
    own = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
            timeout=120,
        ).strip()
    )
    (own / "zz_rlvr_project_torch.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


if __name__ == "__main__":
    print(ensure_env())

"""TRL's own environment for benchmarks/bench_grpo_vs_trl.py, built once and cached.

The packages are benchmarks/trl_requirements.txt, every one pinned, installed with ``uv pip
install --no-deps`` beside the project's environment (rlvr/common/side_env.py: cached under
``~/.cache/rlvr-recipes/trl-<version>-<hash of that file>`` or ``RLVR_TRL_ENV``; the project's
torch is reached through a .pth file, so no second torch is downloaded).
"""

from __future__ import annotations

from pathlib import Path

from rlvr.common.side_env import ensure_side_env, is_built, side_env_dir

REQUIREMENTS = Path(__file__).resolve().parent / "trl_requirements.txt"
TRL_VERSION = "0.24.0"


def env_dir() -> Path:
    return side_env_dir(f"trl-{TRL_VERSION}", REQUIREMENTS.read_bytes(), "RLVR_TRL_ENV")


def built() -> bool:
    return is_built(env_dir())


def ensure_env() -> Path:
    """TRL's environment, built when missing or half built; returns its python."""
    installs = [["--no-deps", "-r", str(REQUIREMENTS)]]
    return ensure_side_env(env_dir(), installs, f"trl=={TRL_VERSION}")


if __name__ == "__main__":
    print(ensure_env())

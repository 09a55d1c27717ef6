"""TuFT 0.2.2's server in its CPU test mode, in an environment of its own: the one builder of it,
for the Tinker tests (tests/tuft_server.py) and for anyone who wants to run the loop against a
real TuFT server on a machine without a GPU (``scripts/tuft_env.py``, docs/TINKER.md).

TuFT pins torch 2.11, transformers 5 and vLLM 0.24, which cannot share the project's
environment. ``TUFT_CPU_TEST=1`` needs none of vLLM: the packages that mode imports are pinned in
``tuft_cpu_requirements.txt`` beside this file, TuFT itself is installed ``--no-deps``, and torch
is the project's (rlvr/common/side_env.py: cached under ``~/.cache/rlvr-recipes/tuft-0.2.2-<hash
of the pins>`` or ``RLVR_TUFT_ENV``, built again when the pins change or a build was cut short).
A TuFT server on GPUs wants TuFT's full install instead (``pip install tuft==0.2.2``).
"""

from __future__ import annotations

from pathlib import Path

from rlvr.common.side_env import ensure_side_env, side_env_dir

REQUIREMENTS = Path(__file__).with_name("tuft_cpu_requirements.txt")
TUFT = "tuft==0.2.2"
#: The environment variable that puts TuFT's server in its CPU test mode.
CPU_TEST_ENV = {"TUFT_CPU_TEST": "1"}


def env_dir() -> Path:
    return side_env_dir("tuft-0.2.2", REQUIREMENTS.read_bytes() + TUFT.encode(), "RLVR_TUFT_ENV")


def ensure_env() -> Path:
    """The server's environment, built when missing or half built; returns its python."""
    installs = [["-r", str(REQUIREMENTS)], ["--no-deps", TUFT]]
    return ensure_side_env(env_dir(), installs, TUFT)

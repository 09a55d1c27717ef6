"""Build TuFT 0.2.2's CPU test-mode environment (once; cached) and print its python.

Usage: uv run scripts/tuft_env.py

The environment the Tinker tests start TuFT's real server from (rlvr/tinker/tuft_env.py): its
own packages, the project's torch. Start a server from it, one whose model is a toy (samples
count up from the prompt's last token; checkpoints hold metadata, no weights):

    TUFT_CPU_TEST=1 "$(uv run scripts/tuft_env.py)" -m tuft launch --host 127.0.0.1 \\
        --port 10610 --config tuft.yaml --checkpoint-dir /tmp/tuft-checkpoints

The first build downloads its packages from PyPI. A failed build is one line, exit 1.
"""

from __future__ import annotations

import subprocess
import sys

from rlvr.common.cli import docstring_parser


def main(argv: list[str] | None = None) -> int:
    docstring_parser(__doc__ or "").parse_args(argv)
    from rlvr.tinker.tuft_env import TUFT, ensure_env

    try:
        python = ensure_env()
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"tuft_env: cannot build {TUFT}'s environment: {exc}", file=sys.stderr)
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

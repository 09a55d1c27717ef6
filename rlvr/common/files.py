"""Writes that never leave a half-written file (stage beside the target, then rename over it),
and a torch-free read of a safetensors file's header."""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlvr.common.signals import signals_deferred


@contextmanager
def staged(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``, moved onto it only if the block finishes."""
    staging = path.with_name(f".{path.name}.tmp")
    try:
        yield staging
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)


def swap_in(new: Path, destination: Path, aside: Path) -> Path | None:
    """Move folder ``new`` onto ``destination``; an existing destination is first renamed to
    ``aside`` (returned; None when there was nothing) and put back if the second move fails."""
    moved = None
    with signals_deferred():  # Ctrl-C between the renames would leave no destination at all
        if destination.exists():
            os.replace(destination, aside)
            moved = aside
        try:
            os.replace(new, destination)
        except BaseException:
            if moved is not None:
                os.replace(moved, destination)
            raise
    return moved


@contextmanager
def staged_dir(destination: Path) -> Iterator[Path]:
    """A fresh folder beside ``destination``, moved onto it whole only if the block finishes.

    An existing ``destination`` is replaced only then (the caller decides whether it may be:
    see ``--force`` in the CLIs); an interrupted block leaves it as it was.
    """
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.partial-", dir=destination.parent))
    try:
        yield staging
        aside = destination.with_name(f".{destination.name}.replaced-{os.getpid()}")
        if swap_in(staging, destination, aside) is not None:
            shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_text_atomic(path: Path, text: str) -> None:
    with staged(path) as staging:
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

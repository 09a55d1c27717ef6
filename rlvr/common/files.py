"""Writes that never leave a half-written file (stage beside the target, then rename over it),
and a torch-free read of a safetensors file's header."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def staged(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``, moved onto it only if the block finishes."""
    staging = path.with_name(f".{path.name}.tmp")
    try:
        yield staging
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)


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

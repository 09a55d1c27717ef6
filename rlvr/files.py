"""Writes that never leave a half-written file: stage beside the target, then rename over it."""

from __future__ import annotations

import json
import os
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

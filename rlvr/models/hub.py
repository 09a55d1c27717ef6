"""Telling a hub model id from a local path, the same way in pre-flight, eval and LoRA merge.

transformers treats a string that is not an existing folder as a hub id, so a mistyped local
path (``artifacts/models/tny``) turns into a hub lookup that fails minutes later; the checks
here say so at once.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
WEIGHT_GLOBS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "*.pt")
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def looks_local(path: str) -> bool:
    """A string meant as a local path: it starts like one (``/ ./ ../ ~``), or its parent folder
    exists here (``artifacts/models/tny``), so it cannot be meant as a hub id."""
    if path.startswith(("/", "./", "../", "~", ".")):
        return True
    parent = Path(path).parent
    return parent != Path(".") and parent.is_dir()


def offline() -> bool:
    return any(
        os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
        for name in OFFLINE_VARIABLES
    )


def _in_hub_cache(repo_id: str) -> bool:
    """Whether the HF cache holds the repo's config.json (what an offline load needs first)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers always brings it
        return False
    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def folder_problem(folder: Path) -> str | None:
    """Why a local model folder cannot be loaded (no config.json, no weights), or None."""
    if not folder.is_dir():
        return "is a file, not a model folder"
    if not (folder / "config.json").is_file():
        return "has no config.json (not a Hugging Face model folder)"
    if not any(f.is_file() for pattern in WEIGHT_GLOBS for f in folder.glob(pattern)):
        return "has config.json but no weights (*.safetensors or pytorch_model*.bin)"
    return None


def model_path_problem(path: str) -> str | None:
    """Why ``path`` (a model folder or a hub id, as verl's ``model.path``) will not load, or None.

    Local folders must hold config.json and weights; ``~`` is refused because verl and
    transformers do not expand it; a hub id must be ``owner/name`` and, offline
    (``HF_HUB_OFFLINE=1``), already be in the HF cache.
    """
    if not path.strip():
        return "is empty; set it to a model folder or a hub id (owner/name)"
    if path.startswith("~"):
        return (
            f"starts with ~, which verl does not expand; write the full path "
            f"({Path(path).expanduser()})"
        )
    local = Path(path)
    if local.exists():
        problem = folder_problem(local)
        return (
            f"{problem}; point it at a model folder (config.json and weights)" if problem else None
        )
    if looks_local(path):
        return (
            "no such folder; fix the path, or build a local model with "
            "`uv run scripts/build_model.py tiny` (hub ids are owner/name)"
        )
    if not HUB_ID.match(path):
        return "is neither a local folder nor a hub id (org/name)"
    if offline() and not _in_hub_cache(path):
        return (
            "is a hub id, but HF_HUB_OFFLINE is set and the HF cache has no copy; download it "
            "first (huggingface-cli download " + path + ") or pass a local folder"
        )
    return None

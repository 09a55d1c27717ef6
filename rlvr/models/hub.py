"""Telling a hub model id from a local path, the same way in pre-flight, eval and LoRA merge.

transformers treats a string that is not an existing folder as a hub id, so a mistyped local
path (``artifacts/models/tny``) turns into a hub lookup that fails minutes later; the checks
here say so at once.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from rlvr.common.files import read_safetensors_header

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# What from_pretrained loads: files holding tensors (an index only maps names to shards, and a
# *.pt is an optimizer or FSDP shard, never loaded). One rule for pre-flight, eval and merge.
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin")
INDEX_GLOBS = ("*.safetensors.index.json", "pytorch_model*.bin.index.json")
# The indexes transformers follows when the single weight file beside them is absent.
SHARD_INDEXES = (
    ("model.safetensors.index.json", "model.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model.bin"),
)
# Names only a PEFT-wrapped model's state dict has: verl's hf_model of a LoRA run.
PEFT_KEY = re.compile(r"^base_model\.model\.|\.base_layer\.|\.lora_(A|B|embedding_A|embedding_B)\.")
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


class WeightsError(ValueError):
    """Weight files that cannot be used: an unreadable header or index, missing shards."""


def _matching(folder: Path, patterns: tuple[str, ...]) -> list[Path]:
    return sorted({p for pattern in patterns for p in folder.glob(pattern) if p.is_file()})


def weight_files(folder: Path) -> list[Path]:
    """The files in ``folder`` that hold tensors (*.safetensors, pytorch_model*.bin)."""
    return _matching(folder, WEIGHT_GLOBS)


def index_files(folder: Path) -> list[Path]:
    """The shard indexes in ``folder`` (``*.safetensors.index.json``...)."""
    return _matching(folder, INDEX_GLOBS)


def read_json(file: Path) -> tuple[object, str | None]:
    """The file's JSON value, or the reason it has none."""
    try:
        return json.loads(file.read_text()), None
    except OSError as exc:
        return None, f"{file}: unreadable ({exc.strerror or exc})"
    except ValueError as exc:
        return None, f"{file}: not valid JSON ({exc})"


def config_problem(config_file: Path) -> str | None:
    """Why ``AutoConfig.from_pretrained`` would refuse a model folder's config.json."""
    config, problem = read_json(config_file)
    if problem:
        return f"{problem}; pass a model folder saved by save_pretrained"
    if not isinstance(config, dict):
        return f"{config_file}: a JSON {type(config).__name__}, not an object; pass a model folder"
    if not isinstance(config.get("model_type"), str):
        return f"{config_file}: no model_type; pass a model folder saved by save_pretrained"
    return None


def index_problem(folder: Path) -> str | None:
    """A sharded checkpoint's index that transformers cannot follow: not an object, without
    its metadata or weight_map, or naming shard files the folder lacks."""
    for index_name, single in SHARD_INDEXES:
        index_file = folder / index_name
        if not index_file.is_file() or (folder / single).is_file():
            continue
        index, problem = read_json(index_file)
        if problem:
            return problem
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(index, dict) or not isinstance(index.get("metadata"), dict):
            return f"{index_file}: no metadata object; copy the complete model folder"
        if not isinstance(weight_map, dict) or not weight_map:
            return f"{index_file}: no weight_map; copy the complete model folder"
        shards = sorted({str(shard) for shard in weight_map.values()})
        missing = [shard for shard in shards if not (folder / shard).is_file()]
        if missing:
            return (
                f"{index_file}: lists shard file(s) not in the folder ({', '.join(missing[:3])}"
                f"{', ...' if len(missing) > 3 else ''}); copy the complete model folder"
            )
    return None


def weight_state(folder: Path) -> str:
    """``missing`` (no folder), ``empty`` (no weight files), ``peft`` (PEFT-keyed weights,
    verl's hf_model of a LoRA run) or ``plain`` (ordinary weights; ``.bin`` is not opened).

    WeightsError for an unreadable safetensors header or an index transformers cannot follow
    (``index_problem``): from_pretrained would fail on either."""
    if not folder.is_dir():
        return "missing"
    files = weight_files(folder)
    if not files:
        return "empty"
    problem = index_problem(folder)
    if problem is not None:
        raise WeightsError(problem)
    keys: list[str] = []
    for file in files:
        if file.suffix == ".safetensors":
            try:
                keys += [key for key in read_safetensors_header(file) if key != "__metadata__"]
            except (OSError, ValueError) as exc:
                raise WeightsError(f"{file}: unreadable safetensors header ({exc})") from exc
    return "peft" if any(PEFT_KEY.search(key) for key in keys) else "plain"


def folder_problem(folder: Path) -> str | None:
    """Why a local model folder cannot be loaded (no config.json, no usable weights), or None;
    the weights by ``weight_state``, the rule eval and the LoRA merge apply."""
    if not folder.is_dir():
        return "is a file, not a model folder"
    if not (folder / "config.json").is_file():
        return "has no config.json (not a Hugging Face model folder)"
    problem = config_problem(folder / "config.json")
    if problem is not None:
        return f"has a config.json transformers refuses: {problem}"
    try:
        state = weight_state(folder)
    except WeightsError as exc:
        return f"has weights that will not load: {exc}"
    if state == "empty":
        return "has config.json but no weights (*.safetensors or pytorch_model*.bin)"
    if state == "peft":
        return (
            "holds PEFT-keyed LoRA weights (verl's hf_model save of a LoRA run), which load as "
            f"random layers; merge the adapter first (uv run scripts/merge_lora.py {folder.parent})"
        )
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
            f"first (uv run hf download {path}) or pass a local folder"
        )
    return None

"""What ``--model_path`` names (a model folder, a LoRA adapter, a hub id), checked before any
weights load, and the tokenizer that goes with it."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.common.messages import first_line
from rlvr.evaluation.errors import EvalError
from rlvr.models.hub import HUB_ID, config_problem, index_problem, looks_local, read_json
from rlvr.train.lora_merge import ADAPTER_DIR, MergeError, weight_state

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass(frozen=True)
class ModelSource:
    """What ``--model_path`` names: a model folder, a LoRA adapter folder, or a hub id."""

    kind: str  # "folder" | "lora" | "hub"
    path: str
    base: str | None = None  # the base model of a LoRA adapter
    tokenizer: str | None = None  # where the tokenizer is, when not next to the weights

    @property
    def tokenizer_path(self) -> str:
        if self.tokenizer is not None:
            return self.tokenizer
        has_tokenizer = self.kind == "lora" and any(
            (Path(self.path) / name).exists()
            for name in ("tokenizer.json", "tokenizer_config.json")
        )
        return self.path if self.kind != "lora" or has_tokenizer else str(self.base)


def resolve_model(model_path: str, base_model: str | None = None) -> ModelSource:
    """Classify ``model_path`` and fail at once, with the reason, when it cannot be a model."""
    return _resolve(model_path, "--model_path", base_model)


def _resolve(
    name: str, label: str, base_model: str | None = None, base_of: Path | None = None
) -> ModelSource:
    """``name`` as a model; ``label`` (the flag or file it came from) starts every refusal.
    ``base_of`` is the adapter whose base this is: a base is a complete model, never another
    adapter, so a chain of adapters (or one naming itself) is refused, not followed."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise EvalError(f"{label} {name}: is a file; pass the model's folder")
        if (path / "adapter_config.json").is_file():
            if base_of is not None:
                raise EvalError(_adapter_as_base(label, name, path, base_of))
            return _lora_source(path, base_model)
        if (path / "config.json").is_file():
            return _folder_source(path, name, label, base_model, base_of)
        raise EvalError(
            f"{label} {name}: no config.json or adapter_config.json inside; for a "
            "verl checkpoint pass .../global_step_N/actor/huggingface"
        )
    if looks_local(name):  # the same rule pre-flight applies (rlvr.models.hub)
        where = f" in {path.parent}/" if path.parent.is_dir() else ""
        raise EvalError(
            f"{label} {name}: no such folder{where} (taken as a local path); check "
            "the name, or pass the model's folder"
        )
    if HUB_ID.match(name):
        return ModelSource("hub", name)
    raise EvalError(f"{label} {name}: no such folder, and not a hub id (org/name)")


def _folder_source(
    path: Path, name: str, label: str, base_model: str | None, base_of: Path | None
) -> ModelSource:
    """A folder with a config.json: its config, index and weights checked as transformers
    will read them."""
    problem = config_problem(path / "config.json") or index_problem(path)
    if problem:
        raise EvalError(f"{label} {name}: {problem}")
    try:
        weights = weight_state(path)
    except MergeError as exc:
        raise EvalError(f"{label} {name}: {exc}") from exc
    adapter = path.parent / ADAPTER_DIR
    if weights == "peft":  # verl 0.6.1's hf_model of a LoRA run: random layers on load
        raise EvalError(
            f"{label} {name}: PEFT-keyed LoRA weights (verl's hf_model save of "
            "a LoRA run), which load as random layers; merge the adapter first: uv run "
            f"scripts/merge_lora.py {path.parent}"
        )
    if weights == "empty" and (adapter / "adapter_config.json").is_file():
        if base_of is not None:
            raise EvalError(_adapter_as_base(label, name, adapter, base_of))
        # A LoRA checkpoint not merged yet: verl wrote config + tokenizer only here.
        source = _lora_source(adapter, base_model, tokenizer=str(path))
        print(
            f"{label} {name}: no weights; loading the LoRA adapter {adapter} "
            f"on its base {source.base}",
            file=sys.stderr,
        )
        return source
    if weights == "empty":
        raise EvalError(
            f"{label} {name}: config.json but no weight files "
            "(*.safetensors or pytorch_model*.bin); pass a complete model folder"
        )
    if not any((path / file).is_file() for file in TOKENIZER_FILES):
        raise EvalError(
            f"{label} {name}: no tokenizer ({' or '.join(TOKENIZER_FILES)}); "
            "pass a folder saved with its tokenizer"
        )
    return ModelSource("folder", str(path))


def _adapter_as_base(label: str, name: str, found: Path, adapter: Path) -> str:
    itself = found.resolve() == adapter.resolve()
    what = "the adapter itself" if itself else f"another LoRA adapter ({found})"
    return (
        f"{label} {name}: is {what}, not a base model; pass --base_model with the complete "
        "model the adapter was trained on"
    )


def check_context(source: ModelSource, max_tokens: int) -> None:
    """``--max_tokens`` within a local model's context (``max_position_embeddings``): beyond it
    HF generates garbage and vLLM refuses, both only after the model has loaded."""
    folder = Path(source.base if source.kind == "lora" and source.base else source.path)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return  # a hub id, or a config the loader will judge
    context = config.get("max_position_embeddings") if isinstance(config, dict) else None
    if isinstance(context, int) and max_tokens >= context:
        raise EvalError(
            f"--max_tokens {max_tokens}: the model's context is {context} tokens "
            f"(max_position_embeddings in {folder / 'config.json'}), prompt included; "
            "lower --max_tokens"
        )


def _lora_source(
    adapter: Path, base_model: str | None, tokenizer: str | None = None
) -> ModelSource:
    adapter_config = adapter / "adapter_config.json"
    config, problem = read_json(adapter_config)
    if problem:
        raise EvalError(f"{problem}; pass a LoRA adapter folder saved by PEFT")
    if not isinstance(config, dict):
        raise EvalError(f"{adapter_config}: a JSON {type(config).__name__}, not an object")
    recorded: object = config.get("base_model_name_or_path")
    if base_model:
        base, label = base_model, "--base_model"
    elif recorded is None or recorded == "":
        raise EvalError(f"{adapter_config}: no base_model_name_or_path; pass --base_model")
    elif not isinstance(recorded, str):
        raise EvalError(
            f"{adapter_config}: base_model_name_or_path is {json.dumps(recorded)}, not a model "
            "folder or hub id (a string); fix it or pass --base_model"
        )
    else:
        base, label = recorded, f"{adapter_config}: base_model_name_or_path"
    try:
        base_source = _resolve(base, label, base_of=adapter)  # the base must itself load
    except EvalError as exc:
        if base_model or "--base_model" in str(exc):
            raise
        raise EvalError(f"{exc}; or pass --base_model") from exc
    return ModelSource("lora", str(adapter), base=base_source.path, tokenizer=tokenizer)


def load_tokenizer(source: ModelSource) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source.tokenizer_path)
    except Exception as exc:
        raise EvalError(load_failure("tokenizer", source.tokenizer_path, exc)) from exc


def load_failure(what: str, where: str, exc: Exception) -> str:
    message = first_line(exc)
    hint = (
        " (hub ids need network access; offline, download the model elsewhere and pass its folder)"
        if HUB_ID.match(where) and not Path(where).exists()
        else ""
    )
    return f"could not load the {what} from {where}: {message}{hint}"

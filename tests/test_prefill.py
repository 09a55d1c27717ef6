"""``shared_prompt_cache``: n samples of a prompt prefilled once decode as if each had its own."""

from __future__ import annotations

import torch

from rlvr.models.prefill import shared_prompt_cache


def test_shared_prefill_decodes_as_a_full_prefill(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    prompts = [[5, 6, 7, 8, 9], [5, 6, 7, 8, 9], [3, 4, 5], [3, 4, 5]]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kwargs = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0, "eos_token_id": []}
    with torch.no_grad():
        plain = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        cache = shared_prompt_cache(model, ids, mask)
        assert cache is not None
        shared = model.generate(input_ids=ids, attention_mask=mask, past_key_values=cache, **kwargs)
    assert torch.equal(plain, shared)


def test_no_cache_when_no_prompt_repeats(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert shared_prompt_cache(model, ids, torch.ones_like(ids)) is None

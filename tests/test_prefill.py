"""``shared_prompt_cache``: n samples of a prompt prefilled once decode as if each had its own;
``PromptPrefills``: prompts prefilled once per process decode as a full prefill does."""

from __future__ import annotations

import torch

from rlvr.models.prefill import PromptPrefills, shared_prompt_cache


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


def _generate(model, prompts: list[list[int]], cache=None) -> torch.Tensor:
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kwargs = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0, "eos_token_id": []}
    if cache is not None:
        kwargs["past_key_values"] = cache
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, **kwargs)


def test_kept_prefills_decode_as_a_full_prefill_and_are_computed_once(tiny_model_dir) -> None:
    """``PromptPrefills``: left-padded batches (repeats, several lengths) decode as ``generate``
    alone does; a prompt seen before, in another batch, is not prefilled again."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    prefills = PromptPrefills(model)
    first = [[5, 6, 7, 8, 9], [5, 6, 7, 8, 9], [3, 4, 5], [3, 4, 5]]
    assert torch.equal(_generate(model, first, prefills.cache(first)), _generate(model, first))
    assert prefills.computed == 2
    second = [[3, 4, 5], [11, 12, 13, 14, 15, 16], [5, 6, 7, 8, 9]]
    assert torch.equal(_generate(model, second, prefills.cache(second)), _generate(model, second))
    assert prefills.computed == 3  # only the new prompt


def test_prefills_past_the_byte_limit_drop_the_oldest(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    one = PromptPrefills(model)
    one.cache([[1, 2, 3]])
    per_prompt = one.bytes_kept
    prefills = PromptPrefills(model, max_bytes=2 * per_prompt)  # two 3-token prompts fit
    for prompt in ([1, 2, 3], [4, 5, 6], [7, 8, 9]):
        prefills.cache([prompt])
    assert prefills.computed == 3 and prefills.bytes_kept <= 2 * per_prompt
    prefills.cache([[7, 8, 9]])
    assert prefills.computed == 3  # kept
    batch = [[1, 2, 3], [7, 8, 9]]
    assert torch.equal(_generate(model, batch, prefills.cache(batch)), _generate(model, batch))
    assert prefills.computed == 4  # [1, 2, 3] was dropped, and is prefilled again


def test_one_token_prompts_get_no_cache(tiny_model_dir) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert PromptPrefills(model).cache([[1], [2, 3]]) is None


def test_an_equal_length_batch_prefills_each_prompt_bitwise_as_alone(tiny_model_dir) -> None:
    """What ``PromptPrefills`` relies on, so that a run decodes the same after another run in the
    same process: prompts prefilled together (one length, no padding) get the very caches each
    gets alone. If a CPU's kernels broke this, this fails, rather than evals drifting."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    prompts = [list(range(3 + i, 40 + i)) for i in range(6)]  # 37 tokens each

    def caches(batch: list[list[int]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        with torch.no_grad():
            return list(model(input_ids=torch.tensor(batch), use_cache=True).past_key_values)

    together = caches(prompts)
    for row, prompt in enumerate(prompts):
        for (keys, values), (alone_keys, alone_values) in zip(
            together, caches([prompt]), strict=True
        ):
            assert torch.equal(keys[row], alone_keys[0]) and torch.equal(
                values[row], alone_values[0]
            )

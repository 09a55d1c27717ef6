"""``grouped_sdpa`` attends as transformers' ``sdpa`` does, without copying keys and values."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from rlvr.models.attention import grouped_sdpa, register


class _Attention(torch.nn.Module):
    """What the attention functions read off a model's attention layer."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


def _inputs(batch: int, heads: int, kv_heads: int, queries: int, keys: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, heads, queries, 16, generator=generator)
    key = torch.randn(batch, kv_heads, keys, 16, generator=generator)
    value = torch.randn(batch, kv_heads, keys, 16, generator=generator)
    # left padding (row b starts at b), and causal over the last `queries` keys
    positions = torch.arange(keys)
    mask = (positions[None, :] >= torch.arange(batch)[:, None])[:, None, None, :]
    causal = positions[None, :] <= (keys - queries + torch.arange(queries))[:, None]
    return query, key, value, (mask & causal[None, None]).expand(batch, 1, queries, keys)


@pytest.mark.parametrize("queries", [1, 5])
@pytest.mark.parametrize(("heads", "kv_heads"), [(9, 3), (8, 2), (4, 4)])
def test_same_output_as_sdpa_with_a_padding_mask(heads: int, kv_heads: int, queries: int) -> None:
    module = _Attention(heads // kv_heads)
    query, key, value, mask = _inputs(3, heads, kv_heads, queries, keys=7)
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    grouped, _ = grouped_sdpa(module, query, key, value, mask, scaling=0.25)
    assert grouped.shape == expected.shape == (3, queries, heads, 16)
    torch.testing.assert_close(grouped, expected, rtol=1e-5, atol=1e-6)


def test_a_causal_call_without_a_mask_is_sdpas_own() -> None:
    module = _Attention(3)
    query, key, value, _ = _inputs(2, 6, 2, 4, keys=4)
    expected, _ = sdpa_attention_forward(module, query, key, value, None)
    grouped, _ = grouped_sdpa(module, query, key, value, None)
    assert torch.equal(grouped, expected)


def test_negative_control_query_heads_paired_with_the_wrong_kv_head_differ() -> None:
    """The comparison above can fail: reading head h's keys from h % kv_heads (interleaved
    instead of repeat_kv's h // groups) changes the output."""
    module = _Attention(3)
    query, key, value, mask = _inputs(2, 9, 3, 1, keys=6)
    expected, _ = sdpa_attention_forward(module, query, key, value, mask)
    interleaved = query.reshape(2, 3, 3, 1, 16).transpose(1, 2).reshape(2, 9, 1, 16)
    wrong, _ = grouped_sdpa(module, interleaved, key, value, mask)
    wrong = wrong.reshape(2, 1, 3, 3, 16).transpose(2, 3).reshape(2, 1, 9, 16)
    assert not torch.allclose(wrong, expected, atol=1e-3)


def _gqa_model(attention: str) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=48,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        attn_implementation=attention,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def test_a_loaded_model_generates_the_same_tokens_with_either_attention() -> None:
    """Through ``generate`` with a shared-prefill cache and left padding, as eval decodes."""
    from rlvr.models.prefill import shared_prompt_cache

    models = {name: _gqa_model(name) for name in ("sdpa", register())}
    prompts = [[5, 6, 7, 8, 9], [5, 6, 7, 8, 9], [3, 4, 5], [3, 4, 5]]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kwargs = {"max_new_tokens": 8, "do_sample": True, "pad_token_id": 0, "eos_token_id": []}
    tokens = {}
    with torch.no_grad():
        for name, model in models.items():
            cache = shared_prompt_cache(model, ids, mask)
            torch.manual_seed(1)
            tokens[name] = model.generate(
                input_ids=ids, attention_mask=mask, past_key_values=cache, **kwargs
            )
    assert torch.equal(tokens["sdpa"], tokens[register()])
    assert models[register()].config._attn_implementation == register()

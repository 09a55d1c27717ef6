"""SDPA for grouped-query attention on a CPU without copying the keys and values per head.

With an attention mask (every left-padded batch has one), transformers 4.57's ``sdpa``
(``integrations/sdpa_attention.py``) cannot pass ``enable_gqa`` (PyTorch's CPU kernels fall back
to the math path for it), so it expands each key/value head to the query heads it serves
(``repeat_kv``): a copy of the whole KV cache, x3 for SmolLM2's 9 query and 3 key/value heads, in
every layer at every decoding step. On a 2-core CPU that copy took 40% of a batch-64 decoding
step (torch.profiler); ``benchmarks/gqa_attention.py`` times decoding with and without it.

``grouped_sdpa`` runs the same attention with the query heads that share a key/value head laid
side by side as extra query rows: ``(batch, kv_heads, groups x queries, dim)`` against the keys
and values as they are. Every query row attends to exactly the keys it attends to in ``sdpa``,
with the same mask row, so the output is the same up to float rounding
(``tests/test_attention.py``). Registered with transformers' ``AttentionInterface`` (and its
mask interface, as ``sdpa``'s mask) under ``GROUPED_SDPA``; a model loaded with
``attn_implementation=GROUPED_SDPA`` uses it. Cases it does not cover (no key/value groups, a
causal call without a mask, a per-head mask, dropout, a non-CPU device) go to ``sdpa`` itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

GROUPED_SDPA = "rlvr_grouped_sdpa"


@functools.cache
def _kernels() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """transformers' ``sdpa`` and torch's kernel, imported once (this module stays importable
    without torch: the eval CLI checks its inputs before torch loads)."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward, torch.nn.functional.scaled_dot_product_attention


def grouped_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query (batch, heads, queries, dim), key and
    value (batch, kv_heads, keys, dim); returns (batch, queries, heads, dim), as ``sdpa`` does."""
    sdpa_attention_forward, scaled_dot_product_attention = _kernels()
    batch, heads, queries, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    mask_shared_by_heads = attention_mask is None or (
        attention_mask.ndim == 4 and attention_mask.shape[1] == 1
    )
    plain = (
        groups == 1
        or dropout
        or query.device.type != "cpu"
        or (attention_mask is None and queries > 1)  # causal: rows of a group would see ahead
        or not mask_shared_by_heads
    )
    if plain:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    # Query head h reads key/value head h // groups (repeat_kv's order): rows (group, query).
    grouped_query = query.reshape(batch, kv_heads, groups * queries, dim)
    mask = None
    if attention_mask is not None:
        mask = attention_mask[:, :, :, : key.shape[-2]]
        mask = mask.expand(-1, groups, -1, -1).reshape(batch, 1, groups * queries, -1)
    out = scaled_dot_product_attention(grouped_query, key, value, attn_mask=mask, scale=scaling)
    return out.reshape(batch, heads, queries, dim).transpose(1, 2).contiguous(), None


def register() -> str:
    """Make ``GROUPED_SDPA`` loadable (idempotent); returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register(GROUPED_SDPA, sdpa_mask)
    return GROUPED_SDPA

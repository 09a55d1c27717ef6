"""Prefill each distinct prompt once when ``generate`` samples several responses per prompt.

``generate`` with a batch that repeats a prompt n times runs the prompt's forward n times; on a
CPU that prefill is most of the cost of short answers (a 100-token prompt, a 14-token answer).
``shared_prompt_cache`` runs every distinct prompt but its last token through the model once
and copies the KV cache to each of its rows; ``generate`` then starts from that cache (it feeds
the last prompt token itself), and samples exactly as without it. Used by the CPU rollout
(``rlvr.cpu.rollout``) and the eval's HF backend (``rlvr.evaluation.generation``).
"""

from __future__ import annotations

import inspect
from typing import Any


def takes_logits_to_keep(model: Any) -> bool:
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def shared_prompt_cache(model: Any, input_ids: Any, attention_mask: Any) -> Any:
    """The KV cache of every left-padded prompt but its last token, computed once per distinct
    prompt and copied to each row; None when no prompt repeats."""
    import torch

    width = input_ids.size(1)
    distinct, rows = torch.unique(
        torch.cat([input_ids, attention_mask.to(input_ids.dtype)], dim=1),
        dim=0,
        return_inverse=True,
    )
    if width < 2 or len(distinct) == len(input_ids):
        return None
    ids, mask = distinct[:, : width - 1], distinct[:, width : 2 * width - 1]
    # the positions HF's generate gives a left-padded prompt
    positions = (mask.cumsum(-1) - 1).masked_fill_(mask == 0, 1)
    last_only = {"logits_to_keep": 1} if takes_logits_to_keep(model) else {}
    with torch.no_grad():
        out = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **last_only,
        )
    cache = out.past_key_values
    cache.batch_select_indices(rows)
    return cache

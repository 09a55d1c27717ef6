"""Prefill each distinct prompt once when ``generate`` samples several responses per prompt.

``generate`` with a batch that repeats a prompt n times runs the prompt's forward n times; on a
CPU that prefill is most of the cost of short answers (a 100-token prompt, a 14-token answer).
``shared_prompt_cache`` runs every distinct prompt but its last token through the model once
and copies the KV cache to each of its rows; ``generate`` then starts from that cache (it feeds
the last prompt token itself), and samples exactly as without it. Used by the CPU rollout
(``rlvr.cpu.rollout``) and the eval's HF backend on GPUs (``rlvr.evaluation.generation``).

``PromptPrefills`` is the eval's CPU path: each distinct prompt's KV cache computed once and kept
for the model's life. An eval with ``--greedy_output`` decodes the same prompts twice, sampled
then greedy; the second pass then reuses the first's prefill, which on a CPU is most of a greedy
run (96 prompts of about 100 tokens: 13 of 17 s). A prompt's cache must not depend on the batch
it first came in, or a run would decode differently after another in the same process. New
prompts are prefilled in batches of equal length, without padding: each row then goes through
the operations it would alone, and on the CPU measured (AMD EPYC, AVX-512) the caches were
bitwise those of a batch of one (SmolLM2-135M, the quickstart's 96 prompts: every layer of every
prompt). ``tests/test_prefill.py`` checks it on each machine CI runs on. One prompt at a time
would be 40% slower.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any


def takes_logits_to_keep(model: Any) -> bool:
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def prefill(model: Any, input_ids: Any, attention_mask: Any) -> Any:
    """The KV cache of every left-padded prompt but its last token (which ``generate`` and
    ``rlvr.models.decoding.decode`` feed themselves), at the positions ``generate`` gives."""
    import torch

    ids, mask = input_ids[:, :-1], attention_mask[:, :-1].long()
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
    return out.past_key_values


def shared_prompt_cache(model: Any, input_ids: Any, attention_mask: Any) -> Any:
    """``prefill``'s cache computed once per distinct prompt and copied to each row; None when no
    prompt repeats."""
    import torch

    width = input_ids.size(1)
    distinct, rows = torch.unique(
        torch.cat([input_ids, attention_mask.to(input_ids.dtype)], dim=1),
        dim=0,
        return_inverse=True,
    )
    if width < 2 or len(distinct) == len(input_ids):
        return None
    cache = prefill(model, distinct[:, :width], distinct[:, width:])
    cache.batch_select_indices(rows)
    return cache


# Per-prompt caches kept at most (SmolLM2-135M: 4.6 MB for a 100-token prompt, so about 230
# prompts); the oldest is dropped first, and a dropped prompt is prefilled again when it returns.
MAX_PREFILL_BYTES = 1 << 30


class PromptPrefills:
    """Each prompt's KV cache but its last token, computed once and kept (``MAX_PREFILL_BYTES``),
    assembled into the left-padded batch cache ``generate`` continues from."""

    def __init__(self, model: Any, max_bytes: int = MAX_PREFILL_BYTES) -> None:
        self.model = model
        self.max_bytes = max_bytes
        self._kept: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self._bytes = 0
        self.computed = 0  # prompts prefilled so far (a kept prompt is not counted again)
        # fixed for the model's life: ask once, not on every batch
        self._last_only = {"logits_to_keep": 1} if takes_logits_to_keep(model) else {}

    @property
    def bytes_kept(self) -> int:
        """The kept caches' size in bytes (at most ``max_bytes``, or the one newest prompt)."""
        return self._bytes

    def cache(self, prompts: Sequence[list[int]]) -> Any:
        """The KV cache of ``prompts`` left-padded to the longest, all but each one's last token
        (zeros where padding is: the attention mask hides them); None when a prompt has fewer
        than two tokens (``generate`` then prefills the batch itself)."""
        import torch
        from transformers import DynamicCache

        if min(map(len, prompts)) < 2:
            return None
        width = max(map(len, prompts)) - 1
        heads = [tuple(ids[:-1]) for ids in prompts]  # what is prefilled: all but the last token
        distinct = list(dict.fromkeys(heads))
        found = {}
        for head in distinct:
            if head in self._kept:
                self._kept.move_to_end(head)
                found[head] = self._kept[head]
        found.update(self._prefill([head for head in distinct if head not in found]))
        rows = [found[head] for head in heads]

        def stacked(layer: int, part: int) -> Any:
            return torch.stack([_left_pad(row[layer][part], width) for row in rows])

        layers = [(stacked(layer, 0), stacked(layer, 1)) for layer in range(len(rows[0]))]
        return DynamicCache(ddp_cache_data=layers, config=self.model.config)

    def _prefill(self, new: list[tuple[int, ...]]) -> dict[tuple[int, ...], list[tuple[Any, Any]]]:
        """Prefill ``new`` prompts, those of one length together; each one's cache, also kept."""
        import torch

        computed = {}
        for length in sorted({len(ids) for ids in new}):
            group = [ids for ids in new if len(ids) == length]
            with torch.no_grad():
                out = self.model(input_ids=torch.tensor(group), use_cache=True, **self._last_only)
            layers = list(out.past_key_values)
            for row, ids in enumerate(group):
                computed[ids] = [
                    (keys[row].clone(), values[row].clone()) for keys, values in layers
                ]
                self._keep(ids, computed[ids])
        return computed

    def _keep(self, ids: tuple[int, ...], kv: list[tuple[Any, Any]]) -> None:
        self.computed += 1
        self._kept[ids] = kv
        self._bytes += sum(k.nbytes + v.nbytes for k, v in kv)
        while self._bytes > self.max_bytes and len(self._kept) > 1:
            _, dropped = self._kept.popitem(last=False)
            self._bytes -= sum(k.nbytes + v.nbytes for k, v in dropped)


def _left_pad(states: Any, width: int) -> Any:
    """(heads, tokens, dim) -> (heads, width, dim), zeros before the tokens."""
    import torch

    heads, tokens, dim = states.shape
    if tokens == width:
        return states
    return torch.cat([states.new_zeros(heads, width - tokens, dim), states], dim=1)

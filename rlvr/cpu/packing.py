"""Response log probs from one packed forward: shared prompts, no padding, logits only where read.

verl's actor (``DataParallelPPOActor._forward_micro_batch`` without remove-padding, the CPU path)
runs every row at its full padded width, ``max_prompt_length + max_response_length``, computes
the vocabulary logits at every position, and then reads only the response's. On a CPU that is
most of a step: GRPO repeats each prompt ``rollout.n`` times, prompts are left-padded to
``data.max_prompt_length``, responses are right-padded after their end, and the output layer is a
fifth of a small model's work per position.

``response_log_probs`` computes the same numbers from one forward over packed rows, one per
distinct prompt: the prompt's real tokens once, then each of its responses' real tokens, with a
4-D attention mask that lets a response see its prompt and its own earlier tokens only, and the
position ids verl gave each token. So each response token attends to exactly the keys it attends
to in verl's forward, at the same positions, and the loss and its gradient are the same up to
float rounding (``tests/test_cpu_compat.py`` compares both). Logits are computed only from the
last prompt position on (``logits_to_keep``).
"""

from __future__ import annotations

from typing import Any

import torch
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits


def response_log_probs(
    module: Any,
    micro_batch: dict[str, Any],
    temperature: float,
    calculate_entropy: bool,
) -> tuple[torch.Tensor | None, torch.Tensor] | None:
    """(entropy or None, log probs), each (batch, response_length) with 0 past a response's end,
    as verl's ``_forward_micro_batch`` returns them; None for a layout this does not handle
    (not left-padded prompts followed by right-padded responses, or 3-D position ids)."""
    layout = _Layout.of(micro_batch)
    if layout is None:
        return None
    out = module(
        input_ids=layout.input_ids,
        attention_mask=layout.attention_mask,
        position_ids=layout.position_ids,
        use_cache=False,
        logits_to_keep=layout.keep,
    )
    logits = out.logits[layout.row, layout.column] / temperature  # (tokens, vocab)
    responses = micro_batch["responses"]
    where = (layout.batch_index, layout.token_index)
    zeros = torch.zeros(responses.shape, dtype=logits.dtype, device=logits.device)
    log_probs = zeros.index_put(where, logprobs_from_logits(logits, responses[where]))
    entropy = zeros.index_put(where, entropy_from_logits(logits)) if calculate_entropy else None
    return entropy, log_probs


class _Layout:
    """Packed rows for a micro batch, and where each response token's logits land."""

    input_ids: torch.Tensor  # (rows, width)
    position_ids: torch.Tensor  # (rows, width)
    attention_mask: torch.Tensor  # (rows, 1, width, width), True where a query may attend a key
    keep: int  # logits of the last `keep` positions: the last prompt token's on
    row: torch.Tensor  # per response token: its packed row ...
    column: torch.Tensor  # ... and the kept-logits column that predicts it
    batch_index: torch.Tensor  # per response token: its row in the micro batch ...
    token_index: torch.Tensor  # ... and its index in the response

    @classmethod
    def of(cls, micro_batch: dict[str, Any]) -> _Layout | None:
        input_ids, mask = micro_batch["input_ids"], micro_batch["attention_mask"].bool()
        positions = micro_batch["position_ids"]
        response_width = micro_batch["responses"].size(-1)
        if positions.dim() != 2:
            return None
        prompt_width = input_ids.size(1) - response_width
        prompt_mask, response_mask = mask[:, :prompt_width], mask[:, prompt_width:]
        left_padded = bool((prompt_mask.int().diff(dim=1) >= 0).all())
        right_padded = bool((response_mask.int().diff(dim=1) <= 0).all())
        if not (left_padded and right_padded and prompt_mask[:, -1].all()):
            return None
        prompt_key = torch.cat(
            [input_ids[:, :prompt_width] * prompt_mask, positions[:, :prompt_width] * prompt_mask],
            dim=1,
        )
        _, group = torch.unique(prompt_key, dim=0, return_inverse=True)
        layout = cls()
        layout._pack(
            input_ids, positions, prompt_mask.sum(1), response_mask.sum(1), group, prompt_width
        )
        return layout

    def _pack(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        prompt_lengths: torch.Tensor,
        response_lengths: torch.Tensor,
        group: torch.Tensor,
        prompt_width: int,
    ) -> None:
        rows = int(group.max()) + 1
        prompt_room = int(prompt_lengths.max())  # prompts end at this column in every row
        used = torch.zeros(rows, dtype=torch.long).index_add_(0, group, response_lengths)
        width = prompt_room + int(used.max())
        ids = torch.zeros(rows, width, dtype=input_ids.dtype)
        pos = torch.zeros(rows, width, dtype=positions.dtype)
        segment = torch.full((rows, width), -1)  # -1 padding, 0 prompt, b + 1 row b's response
        fill = [prompt_room] * rows
        row, column, batch_index, token_index = [], [], [], []
        for b, g in enumerate(group.tolist()):
            length, answer = int(prompt_lengths[b]), int(response_lengths[b])
            if segment[g, prompt_room - 1] != 0:  # the group's prompt, right-aligned
                source = slice(prompt_width - length, prompt_width)
                ids[g, prompt_room - length : prompt_room] = input_ids[b, source]
                pos[g, prompt_room - length : prompt_room] = positions[b, source]
                segment[g, prompt_room - length : prompt_room] = 0
            start = fill[g]
            answer_source = slice(prompt_width, prompt_width + answer)
            ids[g, start : start + answer] = input_ids[b, answer_source]
            pos[g, start : start + answer] = positions[b, answer_source]
            segment[g, start : start + answer] = b + 1
            fill[g] += answer
            # token j is predicted at the position before it: the prompt's last for j = 0
            predictors = [prompt_room - 1, *range(start, start + answer - 1)]
            row += [g] * answer
            column += predictors[:answer]
            batch_index += [b] * answer
            token_index += list(range(answer))
        self.input_ids, self.position_ids = ids, pos
        self.attention_mask = _attention(segment)
        self.keep = width - (prompt_room - 1)
        offset = prompt_room - 1  # kept logits start at this column
        self.row = torch.tensor(row, dtype=torch.long)
        self.column = torch.tensor(column, dtype=torch.long) - offset
        self.batch_index = torch.tensor(batch_index, dtype=torch.long)
        self.token_index = torch.tensor(token_index, dtype=torch.long)


def _attention(segment: torch.Tensor) -> torch.Tensor:
    """A query sees earlier (or its own) prompt tokens and its own response's earlier tokens;
    padding sees only itself (a row with no key gives NaN, whose gradient would poison others)."""
    width = segment.size(1)
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    query, key = segment[:, :, None], segment[:, None, :]
    allowed = causal & (key >= 0) & ((key == 0) | (key == query))
    allowed |= torch.eye(width, dtype=torch.bool) & (query < 0)
    return allowed[:, None]

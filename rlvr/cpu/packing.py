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
position ids verl gave each token. When the distinct prompts begin alike (a few-shot example, a
system prompt: 124 of the quickstart's ~205 prompt tokens) and the result stays short
(``MAX_SHARED_ROW``), they share one row instead: that common prefix once, then the rest of each
prompt, then the responses, each prompt part seeing the prefix and itself. So each response token
attends to exactly the keys it attends to in verl's forward, at the same positions, and the loss
and its gradient are the same up to float rounding (``tests/test_cpu_compat.py`` compares both).
Logits are computed only from the first last-prompt position on (``logits_to_keep``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
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
    layout = PackedLayout.of(micro_batch)
    if layout is None:
        return None
    out = module(
        input_ids=layout.input_ids,
        attention_mask=layout.attention_mask,
        position_ids=layout.position_ids,
        use_cache=False,
        logits_to_keep=layout.keep,
    )
    # (tokens, vocab), in fp32 whatever the model computes in: a bf16 log prob of -2 is only good
    # to +-0.008, and the policy ratio exp(new - old) carries that error per token
    logits = out.logits[layout.row, layout.column].float() / temperature
    responses = micro_batch["responses"]
    where = (layout.batch_index, layout.token_index)
    zeros = torch.zeros(responses.shape, dtype=logits.dtype, device=logits.device)
    log_probs = zeros.index_put(where, logprobs_from_logits(logits, responses[where]))
    entropy = zeros.index_put(where, entropy_from_logits(logits)) if calculate_entropy else None
    return entropy, log_probs


# Groups are packed into one row behind their common prompt prefix (a few-shot example, a system
# prompt) only while that row stays this short: its attention is dense, quadratic in the width.
MAX_SHARED_ROW = 1024


class PackedLayout:
    """Packed rows for a micro batch, and where each response token's logits land."""

    input_ids: torch.Tensor  # (rows, width)
    position_ids: torch.Tensor  # (rows, width)
    attention_mask: torch.Tensor  # (rows, 1, width, width), True where a query may attend a key
    keep: int  # logits of the last `keep` positions: the first predicting one's on
    row: torch.Tensor  # per response token: its packed row ...
    column: torch.Tensor  # ... and the kept-logits column that predicts it
    batch_index: torch.Tensor  # per response token: its row in the micro batch ...
    token_index: torch.Tensor  # ... and its index in the response

    @classmethod
    def of(cls, micro_batch: dict[str, Any]) -> PackedLayout | None:
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
        lengths = prompt_mask.sum(1).tolist()
        prompts = [
            (tuple(input_ids[b, prompt_width - n : prompt_width].tolist()),
             tuple(positions[b, prompt_width - n : prompt_width].tolist()))
            for b, n in enumerate(lengths)
        ]  # fmt: skip
        index = {prompt: g for g, prompt in enumerate(dict.fromkeys(prompts))}
        distinct, group = list(index), [index[prompt] for prompt in prompts]
        answers = response_mask.sum(1).tolist()
        shared = _common_prefix(distinct) if len(distinct) > 1 else 0
        merged_width = shared + sum(len(ids) - shared for ids, _ in distinct) + sum(answers)
        if shared and merged_width <= MAX_SHARED_ROW:
            rows = [list(range(len(distinct)))]
        else:
            rows, shared = [[g] for g in range(len(distinct))], 0
        layout = cls()
        layout._pack(rows, distinct, shared, group, input_ids, positions, answers, prompt_width)
        return layout

    def _pack(
        self,
        rows: list[list[int]],
        distinct: list[tuple[tuple[int, ...], tuple[int, ...]]],
        shared: int,
        group: list[int],
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        answers: list[int],
        prompt_width: int,
    ) -> None:
        """Each packed row: its groups' prompts (``_prompt_rows``), then the responses of those
        groups, each token's logits read at the column before it."""
        packed, last_prompt_column = _prompt_rows(rows, distinct, shared)
        row_of = {g: r for r, groups in enumerate(rows) for g in groups}
        row, column, batch_index, token_index = [], [], [], []
        for b, g in enumerate(group):
            tokens, length = packed[row_of[g]], answers[b]
            start = len(tokens.ids)
            source = slice(prompt_width, prompt_width + length)
            tokens.extend(input_ids[b, source].tolist(), positions[b, source].tolist(), g, b)
            # token j is predicted at the position before it: the prompt's last for j = 0
            predictors = [last_prompt_column[g], *range(start, start + length - 1)]
            row += [row_of[g]] * length
            column += predictors[:length]
            batch_index += [b] * length
            token_index += list(range(length))
        self.input_ids, self.position_ids, owner_of, answer_of = _padded(
            packed, input_ids.dtype, positions.dtype
        )
        self.attention_mask = _attention(owner_of, answer_of)
        first = min(last_prompt_column.values())
        self.keep = self.input_ids.size(1) - first
        self.row = torch.tensor(row, dtype=torch.long)
        self.column = torch.tensor(column, dtype=torch.long) - first
        self.batch_index = torch.tensor(batch_index, dtype=torch.long)
        self.token_index = torch.tensor(token_index, dtype=torch.long)


@dataclass
class _RowTokens:
    """One packed row before padding: each token's id, position, group (-1 for the shared
    prefix) and response (its batch row; -1 for prompt tokens)."""

    ids: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    owner: list[int] = field(default_factory=list)
    answer: list[int] = field(default_factory=list)

    def extend(self, ids: Sequence[int], positions: Sequence[int], owner: int, answer: int) -> None:
        self.ids += ids
        self.positions += positions
        self.owner += [owner] * len(ids)
        self.answer += [answer] * len(ids)


def _prompt_rows(
    rows: list[list[int]], distinct: list[tuple[tuple[int, ...], tuple[int, ...]]], shared: int
) -> tuple[list[_RowTokens], dict[int, int]]:
    """Each row's prompt part: its groups' common first ``shared`` prompt tokens once, then the
    rest of each group's prompt; and, per group, the column of its last prompt token."""
    packed: list[_RowTokens] = []
    last_prompt_column: dict[int, int] = {}
    for groups in rows:
        tokens = _RowTokens()
        prefix_ids, prefix_positions = distinct[groups[0]]
        tokens.extend(prefix_ids[:shared], prefix_positions[:shared], -1, -1)
        for g in groups:
            prompt_ids, prompt_pos = distinct[g]
            tokens.extend(prompt_ids[shared:], prompt_pos[shared:], g, -1)
            # a prompt that is all shared prefix ends where that prefix does
            last_prompt_column[g] = len(tokens.ids) - 1 if len(prompt_ids) > shared else shared - 1
        packed.append(tokens)
    return packed, last_prompt_column


def _padded(
    packed: list[_RowTokens], ids_dtype: torch.dtype, positions_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rows right-padded to one width: (ids, positions, owner, answer), owner -2 and answer
    -1 on padding."""
    width = max(len(tokens.ids) for tokens in packed)
    count = len(packed)
    ids = torch.zeros(count, width, dtype=ids_dtype)
    positions = torch.zeros(count, width, dtype=positions_dtype)
    owner = torch.full((count, width), -2)  # -2 padding
    answer = torch.full((count, width), -1)
    for r, tokens in enumerate(packed):
        n = len(tokens.ids)
        ids[r, :n] = torch.tensor(tokens.ids, dtype=ids_dtype)
        positions[r, :n] = torch.tensor(tokens.positions, dtype=positions_dtype)
        owner[r, :n] = torch.tensor(tokens.owner)
        answer[r, :n] = torch.tensor(tokens.answer)
    return ids, positions, owner, answer


def _common_prefix(prompts: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> int:
    """How many first tokens (ids and positions) every prompt shares."""
    shortest = min(len(ids) for ids, _ in prompts)
    ids0, pos0 = prompts[0]
    for i in range(shortest):
        if any(ids[i] != ids0[i] or pos[i] != pos0[i] for ids, pos in prompts[1:]):
            return i
    return shortest


def _attention(owner: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
    """A query sees earlier (or its own) keys of the shared prefix, of its group's prompt and of
    its own response; padding sees only itself (a row with no key gives NaN, whose gradient would
    poison others). ``owner``: a token's group, -1 shared prefix, -2 padding; ``answer``: its
    response's batch row, -1 in a prompt."""
    width = owner.size(1)
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    q_owner, k_owner = owner[:, :, None], owner[:, None, :]
    q_answer, k_answer = answer[:, :, None], answer[:, None, :]
    prompt_key = (k_owner == -1) | ((k_owner == q_owner) & (k_answer == -1))
    own_answer = (k_answer >= 0) & (k_answer == q_answer)
    allowed = causal & (k_owner > -2) & (prompt_key | own_answer)
    allowed |= torch.eye(width, dtype=torch.bool) & (q_owner == -2)
    return allowed[:, None]

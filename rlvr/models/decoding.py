"""Batched decoding that stops computing a row once it has ended: the CPU eval's and rollout's.

``generate`` computes every row of its batch until the last one ends (or the length limit).
After the SFT warm start the quickstart's answers take about 14 tokens while a batch runs to its
longest, 24: about 40% of the rows a decoding step computed had already ended. ``decode``
continues from the same prefilled cache (rlvr/models/prefill.py) and drops ended rows from the
batch and its cache (``batch_select_indices``) once an eighth of the batch has ended, so a step
computes, give or take those few, only rows still running.

It decodes what ``generate`` decodes, for the two decodings it takes: greedy (the argmax), and
sampling at a temperature with nothing else (top-p 1, no top-k), drawn by
``rlvr.models.sampling.draw`` from one uniform number per row of the whole batch at every step,
ended rows included: the numbers ``generate`` with ``InverseCdfSampler`` consumes. A row ends at
its first stop token; later positions hold the pad token, as ``generate`` pads them. Each row
attends to its own keys only, so its logits do not depend on which rows share its batch, up to
float rounding of a smaller matrix product (tests/test_decoding.py compares the tokens and
logits with ``generate``'s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlvr.models.kv_cache import with_room
from rlvr.models.prefill import prefill, takes_logits_to_keep
from rlvr.models.sampling import draw

if TYPE_CHECKING:
    import torch

#: Ended rows stay in the batch until they are this share of it: a drop copies the whole cache.
DROP_SHARE = 1 / 8


@dataclass(frozen=True)
class Decoded:
    tokens: torch.Tensor  # (rows, steps) new token ids, pad after a row's stop token
    logprobs: torch.Tensor  # (rows, steps) each token's log prob under the raw logits
    logits: tuple[torch.Tensor, ...]  # per step (rows, vocabulary) raw logits, when kept
    row_steps: int  # rows computed, summed over the steps (generate: rows x steps)
    # (rows, steps) each token's log prob and each position's entropy under softmax(logits / T),
    # 0 where a row had ended, when scored (``Decoding.score``)
    scores: tuple[torch.Tensor, torch.Tensor] | None = None


@dataclass(frozen=True)
class Decoding:
    """How to decode: ``temperature`` 0 is greedy; ``stop_ids`` end a row (none: the limit)."""

    max_new_tokens: int
    stop_ids: Sequence[int]
    pad_id: int
    temperature: float = 0.0
    keep_logits: bool = False
    # Score each step's running rows at the temperature as it is drawn (a rollout's log probs and
    # entropies) instead of keeping every step's logits for it: those are rows x steps x vocabulary
    # floats (850 MB for 240 rows of 18 steps), scored afterwards at ended rows too.
    score: bool = False


#: What a model's generation_config.json may set for ``decode`` to decode as ``generate`` does:
#: token ids only. ``generate`` fills a caller's default values from that file (Qwen's ships
#: top_k, top_p and a repetition penalty), which ``decode`` would not apply.
TOKEN_ID_KEYS = frozenset({"bos_token_id", "eos_token_id", "pad_token_id", "transformers_version",
                           "_from_model_config", "decoder_start_token_id"})  # fmt: skip


def decodes_as_generate(model: Any) -> bool:
    """The model's own generation defaults are token ids only (see ``TOKEN_ID_KEYS``)."""
    config = getattr(model, "generation_config", None)
    return config is None or set(config.to_diff_dict()) <= TOKEN_ID_KEYS


def decode(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Any, how: Decoding
) -> Decoded:
    """Decode left-padded prompts ``input_ids`` from ``cache``, the KV cache of every prompt but
    its last token (None: prefilled here)."""
    import torch

    rows = input_ids.shape[0]
    if cache is None:
        cache = prefill(model, input_ids, attention_mask)
    state = _Batch(
        rows=torch.arange(rows),
        mask=attention_mask,
        cache=with_room(cache, how.max_new_tokens),
        next_ids=input_ids[:, -1:],
    )
    tokens = torch.full((rows, how.max_new_tokens), how.pad_id, dtype=input_ids.dtype)
    logprobs = torch.zeros(rows, how.max_new_tokens)
    ended = torch.zeros(rows, dtype=torch.bool)
    stop = torch.tensor(list(how.stop_ids), dtype=input_ids.dtype)
    kept: list[torch.Tensor] = []
    scores = (torch.zeros(rows, how.max_new_tokens), torch.zeros(rows, how.max_new_tokens))
    keep_last = {"logits_to_keep": 1} if takes_logits_to_keep(model) else {}
    row_steps, steps = 0, 0
    while steps < how.max_new_tokens and not bool(ended.all()):
        with torch.no_grad():
            out = model(**state.inputs(), use_cache=True, **keep_last)
        logits = out.logits[:, -1, :].float()
        row_steps += len(state.rows)
        chosen = _choose(logits, how.temperature, rows, state.rows)
        running = ~ended[state.rows]
        where = state.rows[running]
        tokens[where, steps] = chosen[running]
        logprobs[where, steps] = torch.log_softmax(logits[running], dim=-1).gather(
            1, chosen[running, None]
        )[:, 0]
        if how.keep_logits:
            full = logits.new_zeros(rows, logits.shape[-1])
            full[state.rows] = logits
            kept.append(full)
        if how.score:
            _score(logits[running], chosen[running], how.temperature, scores, (where, steps))
        ended[where[torch.isin(chosen[running], stop)]] = True
        steps += 1
        state = state.advance(chosen, ~ended[state.rows])
    scored = (scores[0][:, :steps], scores[1][:, :steps]) if how.score else None
    return Decoded(tokens[:, :steps], logprobs[:, :steps], tuple(kept), row_steps, scored)


def _score(
    logits: torch.Tensor,
    chosen: torch.Tensor,
    temperature: float,
    scores: tuple[torch.Tensor, torch.Tensor],
    at: tuple[torch.Tensor, int],
) -> None:
    """Write the chosen tokens' log probs and the entropies under ``softmax(logits / T)`` (T 0:
    the raw logits) at ``at``, as verl's ``logprobs_from_logits`` and ``entropy_from_logits``
    compute them."""
    import torch

    scaled = logits / temperature if temperature > 0 else logits
    log_normaliser = torch.logsumexp(scaled, dim=-1)
    scores[0][at] = scaled.gather(1, chosen[:, None])[:, 0] - log_normaliser
    scores[1][at] = log_normaliser - (torch.softmax(scaled, dim=-1) * scaled).sum(dim=-1)


def _choose(
    logits: torch.Tensor, temperature: float, rows: int, batch_rows: torch.Tensor
) -> torch.Tensor:
    """The next token of each row in the batch: the argmax, or a draw at ``temperature`` from one
    uniform number per row of the whole batch (the ones ``generate``'s sampler would take)."""
    import torch

    if temperature <= 0:
        return logits.argmax(dim=-1)
    uniforms = torch.rand((rows, 1), dtype=torch.float64)[batch_rows]
    probs = torch.softmax(logits / temperature, dim=-1)
    return draw(probs, uniforms)[:, 0]


@dataclass
class _Batch:
    """The rows still computed, by their index in the whole batch, with their attention mask,
    their cache and the token each feeds next."""

    rows: torch.Tensor
    mask: torch.Tensor
    cache: Any
    next_ids: torch.Tensor

    def inputs(self) -> dict[str, Any]:
        """The step's model inputs; positions as ``generate`` derives them from the mask."""
        positions = self.mask.long().sum(dim=-1, keepdim=True) - 1
        return {
            "input_ids": self.next_ids,
            "attention_mask": self.mask,
            "position_ids": positions,
            "past_key_values": self.cache,
        }

    def advance(self, chosen: torch.Tensor, running: torch.Tensor) -> _Batch:
        """The batch of the next step: each row fed its chosen token; ended rows dropped once
        they are ``DROP_SHARE`` of it."""
        import torch

        ones = self.mask.new_ones(len(self.rows), 1)
        mask = torch.cat([self.mask, ones], dim=1)
        finished = len(self.rows) - int(running.sum())
        if finished == 0 or finished < DROP_SHARE * len(self.rows) or finished == len(running):
            return _Batch(self.rows, mask, self.cache, chosen[:, None])
        keep = running.nonzero()[:, 0]
        self.cache.batch_select_indices(keep)
        return _Batch(self.rows[keep], mask[keep], self.cache, chosen[keep, None])

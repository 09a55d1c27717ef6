"""Temperature sampling for HF ``generate`` with one uniform number per row and token, not one
exponential number per vocabulary entry.

``generate`` samples with ``torch.multinomial(probs, 1)``, which draws an exponential variate for
every entry of ``probs`` and takes the argmax of ``probs / E`` (aten's Multinomial.cpp). On a CPU
that is the cost: 76-80 ms for 64 rows of SmolLM2's 49,152-token vocabulary on two cores, 1.8 s
of the quickstart's GRPO rollout of 24 tokens, where inverting the cumulative distribution with
one uniform number per row takes 0.8 ms (benchmarks/bench_sampling.py prints both).
``InverseCdfSampler`` draws that way in a logits processor and leaves only the drawn token
possible; ``generate`` then decodes greedily and its argmax takes it. Same distribution, other
random numbers: a seeded run draws other tokens than ``multinomial`` would.

The cumulative sums are taken in two levels, over blocks of the vocabulary and then inside the
chosen block, running in float64: one float32 ``cumsum`` over the whole vocabulary rounds away
every token whose probability is below half a float32 step at the running total (~3e-8 near 1),
and a flat float64 ``cumsum`` is 14x slower on a CPU. Each block's own mass is a float32 sum
(a float64 copy of Qwen3's vocabulary costs more than the whole draw), so a draw is off the
exact distribution by at most float32 rounding of a block's mass: below 1e-6 of the total
(tests/test_sampling.py).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch loads when a sampler runs: the eval's command line starts without it
    import torch

BLOCK = 256  # vocabulary entries per block: 192 blocks for SmolLM2, 593 for Qwen3


class InverseCdfSampler:
    """A ``generate`` logits processor that samples each row's next token from
    ``softmax(scores / temperature)`` and returns scores where only that token is finite."""

    def __init__(self, temperature: float) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature {temperature}: must be > 0 to sample")
        self.temperature = temperature

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch

        probs = torch.softmax(scores.float() / self.temperature, dim=-1)
        chosen = draw(probs)
        return torch.full_like(scores, float("-inf")).scatter_(1, chosen, 0.0)


def draw(probs: torch.Tensor, uniforms: torch.Tensor | None = None) -> torch.Tensor:
    """One index per row of ``probs`` (rows, vocabulary), drawn with probability proportional to
    its entry, from ``uniforms`` (rows, 1) in [0, 1), float64, or else torch's default generator;
    shape (rows, 1). Zero entries are never drawn."""
    import torch

    rows, vocabulary = probs.shape
    whole = vocabulary - vocabulary % BLOCK
    # float32 sums inside a block (their error is relative to the block's own mass), float64
    # sums across blocks; no padded copy of the vocabulary (that copy cost as much as the rest)
    block_mass = probs[:, :whole].reshape(rows, -1, BLOCK).sum(dim=-1)
    if whole < vocabulary:
        block_mass = torch.cat([block_mass, probs[:, whole:].sum(dim=-1, keepdim=True)], dim=1)
    ends = block_mass.double().cumsum(dim=-1)
    total = ends[:, -1:]
    if not bool(torch.isfinite(total).all() and (total > 0).all()):
        # what torch.multinomial refuses too
        raise RuntimeError("probability tensor contains either inf, nan or element < 0")
    if uniforms is None:
        uniforms = torch.rand((rows, 1), dtype=torch.float64, device=probs.device)
    target = uniforms * total
    block = _first_above(ends, target)
    # the exact sum before the block (ends[block - 1]): the target is never below it
    starts = torch.nn.functional.pad(ends[:, :-1], (1, 0))
    columns = block * BLOCK + torch.arange(BLOCK, device=probs.device)
    inside = probs.gather(1, columns.clamp(max=vocabulary - 1))
    inside = inside.masked_fill(columns >= vocabulary, 0.0)  # past the end of the vocabulary
    rest = target - starts.gather(1, block)
    index = _first_above(inside.cumsum(dim=-1, dtype=torch.float64), rest)
    return block * BLOCK + index


def _first_above(cumulative: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per row, the first position whose cumulative sum exceeds ``target``; where rounding
    leaves none (a target at the very top), the last position with mass of its own."""
    import torch

    found = torch.searchsorted(cumulative, target, right=True)
    last_with_mass = torch.searchsorted(cumulative, cumulative[:, -1:].contiguous(), right=False)
    return torch.minimum(found, last_with_mass)


def inverse_cdf_sampling(config: Any) -> tuple[Any, list[InverseCdfSampler]]:
    """``config`` (a transformers ``GenerationConfig``) as greedy decoding and the sampler that
    makes it draw, when it samples with a temperature and nothing else (no top-k, top-p, min-p,
    typical or cutoff warpers); otherwise ``config`` itself and no sampler."""
    temperature = 1.0 if config.temperature is None else float(config.temperature)
    plain = (
        config.do_sample
        and config.num_beams in (None, 1)
        and config.top_p in (None, 1.0)
        and config.top_k in (None, 0)
        and config.min_p is None
        and config.typical_p in (None, 1.0)
        and not config.epsilon_cutoff
        and not config.eta_cutoff
        and temperature > 0  # else transformers' own refusal
    )
    if not plain:
        return config, []
    greedy = copy.deepcopy(config)
    greedy.do_sample = False
    greedy.temperature, greedy.top_p, greedy.top_k = 1.0, 1.0, None
    return greedy, [InverseCdfSampler(temperature)]

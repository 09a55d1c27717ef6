"""rlvr/models/sampling.py: inverse-CDF draws in a logits processor, checked against the
distribution they draw from (frequencies, exact float64 positions), and inside ``generate``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationConfig

from rlvr.models import sampling
from rlvr.models.sampling import BLOCK, InverseCdfSampler, draw, inverse_cdf_sampling


def _within(counts: np.ndarray, probs: np.ndarray, draws: int) -> bool:
    """Every count within 5 standard deviations of its binomial expectation."""
    expected = probs * draws
    spread = np.sqrt(draws * probs * (1 - probs))
    return bool(np.all(np.abs(counts - expected) <= 5 * spread + 1e-9))


def test_frequencies_match_and_zero_entries_are_never_drawn() -> None:
    torch.manual_seed(0)
    probs = torch.zeros(1000)  # not a whole number of blocks: the last one is padded
    chosen = [0, BLOCK - 1, BLOCK, 2 * BLOCK - 1, 999]  # both edges of a block, and the end
    probs[chosen] = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25])
    draws = 200_000
    index = draw(probs.expand(draws, -1).contiguous())
    assert index.shape == (draws, 1)
    counts = np.bincount(index[:, 0].numpy(), minlength=1000)
    assert set(np.flatnonzero(counts)) <= set(chosen)
    assert _within(counts, probs.numpy().astype(np.float64), draws)


def _cumulative(probs: np.ndarray) -> np.ndarray:
    return np.cumsum(probs.astype(np.float64))


@pytest.mark.parametrize("head_block_tail", [False, True])
def test_tokens_far_below_a_float32_step_are_drawn_where_float64_puts_them(
    monkeypatch: pytest.MonkeyPatch, head_block_tail: bool
) -> None:
    """One likely token and a tail of tokens each far below half a float32 step near 1 (~3e-8):
    a single float32 cumsum adds them to ~1 and rounds each away (0.02% of the mass here, more
    with a larger vocabulary). Across blocks the sums run in float64: the draw is exact. Inside
    the likely token's own block its float32 block sum rounds them: off by < 1e-6 of the mass."""
    tail = 2e-9
    probs = np.full(4 * BLOCK + 7, tail, dtype=np.float32)
    if not head_block_tail:
        probs[1:BLOCK] = 0.0
    probs[0] = 1 - float(np.sum(probs[1:], dtype=np.float64))
    cumulative = _cumulative(probs)
    uniforms = [0.5, probs[0] + 1e-12, probs[0] + 3e-9, 1 - 3e-9, 1 - 1e-12, 0.9999997]
    monkeypatch.setattr(
        torch, "rand", lambda *a, **k: torch.tensor(uniforms, dtype=torch.float64)[:, None]
    )
    got = draw(torch.from_numpy(probs).expand(len(uniforms), -1).contiguous())[:, 0].numpy()
    targets = np.array(uniforms) * cumulative[-1]
    exact = np.searchsorted(cumulative, targets, side="right")
    if not head_block_tail:
        assert got.tolist() == exact.tolist()
        assert len(set(got[1:].tolist())) == len(uniforms) - 1  # distinct tail tokens
    starts = np.concatenate([[0.0], cumulative[:-1]])
    assert np.all(cumulative[got] >= targets - 1e-6) and np.all(starts[got] <= targets + 1e-6)
    assert probs[got].min() > 0


def test_the_very_top_of_the_range_takes_the_last_token_with_mass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probs = torch.zeros(3, 600)
    probs[:, 10], probs[:, 300] = 0.5, 0.5  # zeros after it, and padding after them
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.tensor([[0.0], [0.5], [1.0]]).double())
    assert draw(probs)[:, 0].tolist() == [10, 300, 300]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_what_multinomial_refuses_is_refused(bad: float) -> None:
    probs = torch.full((2, 8), 0.125)
    probs[1, 0] = bad
    if bad < 0:
        probs[1] = torch.tensor([-1.0, 0.5, 0.5, 0, 0, 0, 0, 0])
        probs[1, 1:3] = -0.5  # a row whose total is not positive
    with pytest.raises(RuntimeError, match="inf, nan or element < 0"):
        draw(probs)


def test_the_processor_leaves_only_the_drawn_token() -> None:
    torch.manual_seed(1)
    scores = torch.randn(4, 50)
    out = InverseCdfSampler(0.7)(torch.zeros(4, 1, dtype=torch.long), scores)
    assert torch.isfinite(out).sum(dim=-1).tolist() == [1, 1, 1, 1]
    assert out.dtype == scores.dtype and out.max().item() == 0.0
    with pytest.raises(ValueError, match="must be > 0"):
        InverseCdfSampler(0.0)


@pytest.mark.parametrize(
    ("settings", "swapped"),
    [
        ({"do_sample": True, "temperature": 0.8, "top_p": 1.0, "top_k": 0}, True),
        ({"do_sample": True, "temperature": 1.0, "top_k": None}, True),
        ({"do_sample": True, "temperature": 1.0, "top_p": 0.9, "top_k": 0}, False),
        ({"do_sample": True, "temperature": 1.0, "top_k": 50}, False),
        ({"do_sample": True, "temperature": 1.0, "top_k": 0, "min_p": 0.1}, False),
        ({"do_sample": False}, False),
        ({"do_sample": True, "temperature": 0.0, "top_k": 0}, False),  # transformers decides
    ],
)
def test_only_plain_temperature_sampling_is_swapped(settings: dict, swapped: bool) -> None:
    config = GenerationConfig(**settings)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the greedy copy carries no sampling flag to warn about
        greedy, samplers = inverse_cdf_sampling(config)
        greedy.validate()
    assert bool(samplers) is swapped
    if swapped:
        assert greedy.do_sample is False and config.do_sample is True  # a copy
        assert samplers[0].temperature == config.temperature
    else:
        assert greedy is config


def _first_token_counts(model, sampler_or_none, temperature: float, rows: int) -> np.ndarray:
    ids = torch.tensor([[5, 17, 42, 99]] * rows)
    kwargs: dict = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    if sampler_or_none is not None:
        kwargs = {"do_sample": False, "logits_processor": [sampler_or_none]}
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=1, pad_token_id=0, **kwargs)  # fmt: skip
    return np.bincount(out[:, -1].numpy(), minlength=model.config.vocab_size)


def test_generate_with_the_sampler_draws_the_models_distribution(tiny_model_dir) -> None:
    """The first sampled token of ``generate`` against ``softmax(logits / T)`` of a separate
    forward pass; the same check on multinomial's draws, and on draws at another temperature."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    temperature, rows = 0.02, 4000  # sharp enough that a few tokens carry the mass
    with torch.no_grad():
        logits = model(torch.tensor([[5, 17, 42, 99]])).logits[0, -1].double()
    probs = torch.softmax(logits / temperature, dim=-1).numpy()
    ours = _first_token_counts(model, InverseCdfSampler(temperature), temperature, rows)
    theirs = _first_token_counts(model, None, temperature, rows)
    assert _within(ours, probs, rows) and _within(theirs, probs, rows)
    wrong = _first_token_counts(model, InverseCdfSampler(2 * temperature), temperature, rows)
    assert not _within(wrong, probs, rows)  # negative control: the check can fail


def test_the_module_loads_without_importing_torch_first() -> None:
    assert "torch" not in vars(sampling)  # torch is imported where a sampler runs

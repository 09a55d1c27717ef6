"""``rlvr.models.decoding``: the tokens and log probs ``generate`` gives, greedy and sampled with
the same seed, while ended rows stop being computed (counted, with a control that drops none)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationConfig, LogitsProcessorList

from rlvr.evaluation.generation import _RawLogprobs
from rlvr.models import decoding
from rlvr.models.decoding import Decoding, decode, decodes_as_generate
from rlvr.models.prefill import shared_prompt_cache
from rlvr.models.sampling import InverseCdfSampler
from rlvr.models.tiny import build_model

STEPS = 14


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> torch.nn.Module:
    path = build_model(tmp_path_factory.mktemp("decoding") / "tiny", seed=11)
    return AutoModelForCausalLM.from_pretrained(Path(path)).eval()


def _prompts() -> tuple[torch.Tensor, torch.Tensor]:
    """Four prompts, each twice (as a rollout's groups), two of them left-padded."""
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 300, (4, 10), generator=gen)
    mask = torch.ones_like(ids)
    ids[:2, :4], mask[:2, :4] = 0, 0
    return ids.repeat_interleave(2, dim=0), mask.repeat_interleave(2, dim=0)


def _generate(
    model: torch.nn.Module, temperature: float, stop: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``generate`` gives from the same prefilled cache: new tokens, raw log probs."""
    ids, mask = _prompts()
    recorder = _RawLogprobs()
    processors = [recorder] + ([InverseCdfSampler(temperature)] if temperature > 0 else [])
    config = GenerationConfig(max_new_tokens=STEPS, do_sample=False, top_k=None,
                              eos_token_id=stop, pad_token_id=0)  # fmt: skip
    torch.manual_seed(5)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                             past_key_values=shared_prompt_cache(model, ids, mask),
                             logits_processor=LogitsProcessorList(processors),
                             use_model_defaults=False)  # fmt: skip
    tokens = out[:, ids.shape[1] :]
    return tokens, recorder.finish(tokens)


def _stops(model: torch.nn.Module) -> list[int]:
    """A sixth of the vocabulary as stop tokens: the tiny random model's rows end after a few
    steps each, at different steps (its next-token distribution is nearly flat)."""
    return list(range(5, int(model.config.vocab_size), 6))


@pytest.mark.parametrize("temperature", [0.0, 0.9], ids=["greedy", "sampled"])
def test_decode_gives_what_generate_gives(model: torch.nn.Module, temperature: float) -> None:
    stop = _stops(model)
    want_tokens, want_logprobs = _generate(model, temperature, stop)
    ids, mask = _prompts()
    torch.manual_seed(5)
    how = Decoding(max_new_tokens=STEPS, stop_ids=stop, pad_id=0, temperature=temperature)
    got = decode(model, ids, mask, shared_prompt_cache(model, ids, mask), how)
    assert torch.equal(got.tokens, want_tokens)
    ended = torch.isin(want_tokens, torch.tensor(stop)).cumsum(dim=1)
    valid = (ended == 0) | ((ended == 1) & torch.isin(want_tokens, torch.tensor(stop)))
    torch.testing.assert_close(got.logprobs[valid], want_logprobs[valid], rtol=0, atol=1e-5)
    rows, steps = want_tokens.shape
    assert steps < STEPS or not bool(valid[:, -1].all())  # some rows ended before the limit
    assert got.row_steps < rows * steps  # ...and stopped being computed


def test_the_control_that_drops_no_row_computes_every_row(
    model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With dropping switched off the same tokens come out, from rows x steps computed rows: the
    row count above is what dropping saved, not an artefact of counting."""
    stop = _stops(model)
    ids, mask = _prompts()
    how = Decoding(max_new_tokens=STEPS, stop_ids=stop, pad_id=0, temperature=0.9)
    runs = []
    for share in (decoding.DROP_SHARE, 2.0):  # 2.0: more than the whole batch, never
        monkeypatch.setattr(decoding, "DROP_SHARE", share)
        torch.manual_seed(5)
        runs.append(decode(model, ids, mask, shared_prompt_cache(model, ids, mask), how))
    dropping, keeping = runs
    assert torch.equal(dropping.tokens, keeping.tokens)
    assert keeping.row_steps == keeping.tokens.numel() > dropping.row_steps


def test_kept_logits_are_each_steps_raw_logits(model: torch.nn.Module) -> None:
    """The rollout's log probs come from these: at a running row, the model's logits for it."""
    ids, mask = _prompts()
    how = Decoding(max_new_tokens=4, stop_ids=[], pad_id=0, keep_logits=True)
    got = decode(model, ids, mask, None, how)
    full = torch.cat([ids, got.tokens], dim=1)
    full_mask = torch.cat([mask, torch.ones_like(got.tokens)], dim=1)
    positions = (full_mask.cumsum(-1) - 1).masked_fill_(full_mask == 0, 1)
    with torch.no_grad():
        logits = model(input_ids=full, attention_mask=full_mask, position_ids=positions).logits
    want = logits[:, ids.shape[1] - 1 : -1]
    torch.testing.assert_close(torch.stack(got.logits, dim=1), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_scores_are_verls_log_probs_and_entropies_of_the_kept_logits(
    model: torch.nn.Module, temperature: float
) -> None:
    """``score``: the rollout's log probs and entropies as drawn, the numbers verl's functions
    give from every step's kept logits (as the rollout computed them before), to the bit, at
    running rows; 0 once a row has ended, where the kept logits are zeros."""
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    ids, mask = _prompts()
    stop = [int(t) for t in range(3, 60)]  # rows end at different steps
    torch.manual_seed(5)
    kept = decode(model, ids, mask, None, Decoding(STEPS, stop, 0, temperature, keep_logits=True))
    torch.manual_seed(5)
    scored = decode(model, ids, mask, None, Decoding(STEPS, stop, 0, temperature, score=True))
    assert torch.equal(kept.tokens, scored.tokens) and scored.scores is not None
    ended = (torch.isin(kept.tokens, torch.tensor(stop)).int().cumsum(1) > 0).roll(1, dims=1)
    ended[:, 0] = False
    assert ended.any() and not ended.all()
    logits = torch.stack(kept.logits, dim=1).div_(temperature)
    want_log_probs = logprobs_from_logits(logits, kept.tokens)
    want_entropy = entropy_from_logits(logits)
    log_probs, entropy = scored.scores
    assert torch.equal(log_probs[~ended], want_log_probs[~ended])
    assert torch.equal(entropy[~ended], want_entropy[~ended])
    assert not log_probs[ended].any() and not entropy[ended].any()
    assert kept.scores is None


def test_generation_defaults_beyond_token_ids_keep_generate(model: torch.nn.Module) -> None:
    assert decodes_as_generate(model)
    model.generation_config.repetition_penalty = 1.05  # as Qwen's generation_config.json
    try:
        assert not decodes_as_generate(model)
    finally:
        model.generation_config.repetition_penalty = 1.0

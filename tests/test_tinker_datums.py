"""The Tinker loop's Datums carry exactly the importance-sampling inputs Tinker documents, and
their advantages are verl's GRPO advantages for the same rewards.

The reference is computed apart from rlvr.tinker: verl's ``compute_grpo_outcome_advantage`` on a
padded [responses, tokens] batch with each reward on its response's last token (how verl's
reward manager places it), read back per token under the response mask. The layout is read back
from real ``tinker.types.Datum`` objects. Each check has a negative control: a Datum whose
prompt mask is off by one position, and advantages normalised another way, both fail it.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from rlvr.tinker.datums import DatumInputs, Sample, build_datums, datum_inputs, to_datum


def make_groups(seed: int, groups: int = 5, size: int = 4) -> list[list[Sample]]:
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        prompt = tuple(rng.randrange(1, 500) for _ in range(rng.randint(2, 9)))
        constant = g == 1  # one group whose rewards all agree: dropped
        group = []
        for _ in range(size):
            tokens = tuple(rng.randrange(1, 500) for _ in range(rng.randint(1, 7)))
            logprobs = tuple(-rng.random() * 3 for _ in tokens)
            reward = 0.1 if constant else rng.choice([0.0, 0.1, 1.0, 0.55])
            group.append(Sample(prompt, tokens, logprobs, reward))
        if not constant and len({s.reward for s in group}) == 1:
            group[0] = Sample(prompt, group[0].tokens, group[0].logprobs, 1.0 - group[0].reward)
        out.append(group)
    return out


def verl_reference(groups: list[list[Sample]]) -> list[list[list[float]]]:
    """Per response, verl's per-token advantages over its response tokens."""
    flat = [s for group in groups for s in group]
    width = max(len(s.tokens) for s in flat)
    rewards = torch.zeros(len(flat), width)
    mask = torch.zeros(len(flat), width)
    for row, sample in enumerate(flat):
        mask[row, : len(sample.tokens)] = 1
        rewards[row, len(sample.tokens) - 1] = sample.reward
    index = [g for g, group in enumerate(groups) for _ in group]
    advantages, _ = compute_grpo_outcome_advantage(
        rewards, mask, index, norm_adv_by_std_in_grpo=True
    )
    per_response = [advantages[row, : len(s.tokens)].tolist() for row, s in enumerate(flat)]
    out, row = [], 0
    for group in groups:
        out.append(per_response[row : row + len(group)])
        row += len(group)
    return out


def check_layout(datum: object, sample: Sample, expected_advantage: list[float]) -> None:
    """What Tinker's importance_sampling reads, from a real Datum: input = prompt +
    response[:-1]; per position the next token, the sampler's log prob and the advantage, 0 on
    the prompt positions."""
    model_input = datum.model_input.to_ints()  # type: ignore[attr-defined]
    inputs = {k: v.tolist() for k, v in datum.loss_fn_inputs.items()}  # type: ignore[attr-defined]
    prompt, response = list(sample.prompt_tokens), list(sample.tokens)
    pad = len(prompt) - 1
    assert model_input == prompt + response[:-1]
    assert set(inputs) == {"target_tokens", "logprobs", "advantages"}
    assert all(len(v) == len(model_input) for v in inputs.values())
    assert inputs["target_tokens"] == (prompt + response)[1:]
    assert inputs["target_tokens"][pad:] == response
    assert inputs["logprobs"][:pad] == [0.0] * pad
    assert inputs["logprobs"][pad:] == pytest.approx(list(sample.logprobs), abs=1e-6)
    assert inputs["advantages"][:pad] == [0.0] * pad
    assert inputs["advantages"][pad:] == pytest.approx(expected_advantage, abs=1e-5)


@pytest.mark.extra("tinker")  # real tinker.types.Datum objects
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_datums_are_the_documented_inputs_with_verl_advantages(seed: int) -> None:
    groups = make_groups(seed)
    inputs, advantages = build_datums(groups)
    reference = verl_reference(groups)
    assert advantages[1] is None  # the constant group sends nothing
    kept = [(s, ref) for g, group in enumerate(groups) if g != 1
            for s, ref in zip(group, reference[g], strict=True)]  # fmt: skip
    assert len(inputs) == len(kept) == 4 * 4
    for datum_input, (sample, ref) in zip(inputs, kept, strict=True):
        check_layout(to_datum(datum_input), sample, ref)


@pytest.mark.extra("tinker")  # real tinker.types.Datum objects
def test_negative_control_a_prompt_mask_off_by_one_fails() -> None:
    groups = make_groups(3)
    sample = groups[0][0]
    good = datum_inputs(sample, 0.5)
    shifted = DatumInputs(  # the response's weights start one position early
        good.model_input, good.target_tokens, [*good.logprobs[1:], 0.0],
        [*good.advantages[1:], 0.0],
    )  # fmt: skip
    check_layout(to_datum(good), sample, [0.5] * len(sample.tokens))
    with pytest.raises(AssertionError):
        check_layout(to_datum(shifted), sample, [0.5] * len(sample.tokens))


@pytest.mark.extra("tinker")  # real tinker.types.Datum objects
def test_negative_control_advantages_normalised_otherwise_fail() -> None:
    groups = make_groups(4)
    reference = verl_reference(groups)
    inputs, _ = build_datums(groups)
    # The guide's population std instead of verl's unbiased one: a different advantage.
    group = groups[0]
    rewards = torch.tensor([s.reward for s in group])
    population = ((rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-6)).tolist()
    with pytest.raises(AssertionError):
        check_layout(to_datum(inputs[0]), group[0], [population[0]] * len(group[0].tokens))
    check_layout(to_datum(inputs[0]), group[0], reference[0][0])


def test_every_group_agreeing_sends_nothing_and_keeping_them_sends_zeros() -> None:
    prompt = (5, 6, 7)
    group = [Sample(prompt, (8, 9), (-0.1, -0.2), 0.1) for _ in range(3)]
    inputs, advantages = build_datums([group])
    assert inputs == [] and advantages == [None]
    inputs, advantages = build_datums([group], drop_constant=False)
    assert len(inputs) == 3 and all(set(i.advantages) == {0.0} for i in inputs)


def test_a_sample_without_one_log_prob_per_token_is_refused() -> None:
    with pytest.raises(ValueError, match="2 sampling log probs for 3 response tokens"):
        datum_inputs(Sample((1, 2), (3, 4, 5), (-0.1, -0.2), 1.0), 1.0)


TUFT_LOSS = """
import json, sys
import torch
from tinker import types
from torch.nn.utils.rnn import pad_sequence
from tuft.backends.loss_inputs import batch_loss_fn_input, validate_client_loss_fn_inputs
from tuft.loss_fn import get_loss_fn

kinds = {"target_tokens": "int64", "logprobs": "float32", "advantages": "float32"}
results = []
for spec in json.load(sys.stdin):
    data = [
        types.Datum(
            model_input=types.ModelInput.from_ints(d["model_input"]),
            loss_fn_inputs={k: types.TensorData(data=d[k], dtype=t) for k, t in kinds.items()},
        )
        for d in spec["datums"]
    ]
    keys = validate_client_loss_fn_inputs(data, required_keys=frozenset(kinds))
    inputs = {k: batch_loss_fn_input(data, k, device="cpu") for k in ("logprobs", "advantages")}
    current = [torch.tensor(c, dtype=torch.float32) for c in spec["current"]]
    inputs["target_logprobs"] = pad_sequence(current, batch_first=True)
    loss, metrics = get_loss_fn("importance_sampling")(inputs, {})
    results.append({"keys": sorted(keys), "loss": loss.item()})
print(json.dumps(results))
"""


def tuft_losses(
    batches: list[list[DatumInputs]], current: list[list[float]]
) -> list[dict[str, Any]]:
    """TuFT 0.2.2's own code on each batch of Datums, in its environment: the request validation
    its training backends run, its batching of loss inputs, and its importance_sampling loss,
    given the policy's log prob of each target token (``current``, standing in for the model)."""
    import json
    import subprocess

    from rlvr.tinker.tuft_env import ensure_env

    specs = [{"datums": [vars(i) for i in batch], "current": current} for batch in batches]
    done = subprocess.run([str(ensure_env()), "-c", TUFT_LOSS], input=json.dumps(specs),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_tufts_own_importance_sampling_loss_reads_the_datums_as_documented() -> None:
    """The loss TuFT computes from the loop's Datums equals -sum(exp(logp - logp_sampler) * A)
    over the response tokens alone, computed here from the samples themselves; the Datums of a
    prompt mask off by one give another loss (the control)."""
    groups = make_groups(5)
    inputs, advantages = build_datums(groups)
    rng = random.Random(7)
    current = [[lp + rng.uniform(-0.5, 0.5) for lp in i.logprobs] for i in inputs]
    kept = [(s, a) for group, adv in zip(groups, advantages, strict=True) if adv is not None
            for s, a in zip(group, adv, strict=True)]  # fmt: skip
    expected = 0.0
    for (sample, advantage), policy in zip(kept, current, strict=True):
        pad = len(sample.prompt_tokens) - 1
        for token, sampler_lp in enumerate(sample.logprobs):
            expected -= math.exp(policy[pad + token] - sampler_lp) * advantage
    shifted = [
        DatumInputs(i.model_input, i.target_tokens, [*i.logprobs[1:], 0.0], [*i.advantages[1:], 0])
        for i in inputs
    ]
    result, control = tuft_losses([inputs, shifted], current)
    assert result["keys"] == ["advantages", "logprobs", "target_tokens"]
    assert result["loss"] == pytest.approx(expected, rel=1e-4, abs=1e-4)
    assert control["loss"] != pytest.approx(expected, rel=1e-3, abs=1e-3)

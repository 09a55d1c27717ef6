"""From graded groups of samples to the ``Datum`` s of Tinker's ``importance_sampling`` loss.

Advantages are verl's GRPO advantages (``compute_grpo_outcome_advantage``, what every verl recipe
here trains with), and a group whose responses all scored alike sends nothing (the TuFT guide's
"if sigma is ~0, the prompt is skipped"; ``rlvr.common.groups.varied_groups`` decides it, as
for the verl recipes' ``grpo_drop_constant``).

One sampled response becomes one Datum, laid out as Tinker documents the importance-sampling
loss (tinker-docs "Loss functions"; the TuFT guide's "Datum Format for RL"): the model reads
``prompt + response[:-1]`` and at each position predicts the next token, so with ``P`` prompt
and ``T`` response tokens every per-token input has ``P + T - 1`` entries::

    target_tokens  (prompt + response)[1:]          the next token at each position
    logprobs       [0] * (P - 1) + sampling_logprobs  the sampler's log prob of each response token
    advantages     [0] * (P - 1) + [A] * T           0 on the prompt, the group's A on the response

and the server's loss is ``-sum(exp(logp_theta - logprobs) * advantages)``: only response
positions carry weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.common.groups import varied_groups


@dataclass(frozen=True)
class Sample:
    """One sampled response to a prompt, graded."""

    prompt_tokens: tuple[int, ...]
    tokens: tuple[int, ...]  # the response the sampler returned (stop token included)
    logprobs: tuple[float, ...]  # the sampler's log prob of each response token
    reward: float


def group_advantages(
    groups: Sequence[Sequence[float]], norm_by_std: bool = True, drop_constant: bool = True
) -> list[list[float] | None]:
    """Per group, each response's advantage (verl's GRPO); None for a dropped group (all its
    rewards alike, with ``drop_constant``)."""
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards = [float(r) for group in groups for r in group]
    if not rewards:
        return []
    index = [g for g, group in enumerate(groups) for _ in group]
    scores = torch.tensor(rewards, dtype=torch.float32).unsqueeze(-1)  # one "token" per response
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=scores,
        response_mask=torch.ones_like(scores),
        index=index,
        norm_adv_by_std_in_grpo=norm_by_std,
    )
    keep = varied_groups(scores.squeeze(-1), index)
    out: list[list[float] | None] = []
    row = 0
    for group in groups:
        rows = range(row, row + len(group))
        row += len(group)
        dropped = drop_constant and not bool(keep[rows[0]]) if len(group) else True
        out.append(None if dropped else [float(advantages[r, 0]) for r in rows])
    return out


@dataclass(frozen=True)
class DatumInputs:
    """A Datum's contents as plain lists (what the tests read back, and what ``to_datum`` sends)."""

    model_input: list[int]
    target_tokens: list[int]
    logprobs: list[float]
    advantages: list[float]


def datum_inputs(sample: Sample, advantage: float) -> DatumInputs:
    """The importance-sampling inputs of one response (module docstring)."""
    prompt, response = list(sample.prompt_tokens), list(sample.tokens)
    if not prompt or not response:
        raise ValueError("a Datum needs at least one prompt and one response token")
    if len(sample.logprobs) != len(response):
        raise ValueError(
            f"{len(sample.logprobs)} sampling log probs for {len(response)} response tokens"
        )
    pad = len(prompt) - 1
    return DatumInputs(
        model_input=prompt + response[:-1],
        target_tokens=(prompt + response)[1:],
        logprobs=[0.0] * pad + [float(lp) for lp in sample.logprobs],
        advantages=[0.0] * pad + [float(advantage)] * len(response),
    )


def to_datum(inputs: DatumInputs) -> Any:
    """A ``tinker.types.Datum`` of ``inputs``."""
    from tinker import types

    return types.Datum(
        model_input=types.ModelInput.from_ints(inputs.model_input),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=inputs.target_tokens, dtype="int64"),
            "logprobs": types.TensorData(data=inputs.logprobs, dtype="float32"),
            "advantages": types.TensorData(data=inputs.advantages, dtype="float32"),
        },
    )


def build_datums(
    groups: Sequence[Sequence[Sample]], norm_by_std: bool = True, drop_constant: bool = True
) -> tuple[list[DatumInputs], list[list[float] | None]]:
    """Every kept response's Datum inputs, and each group's advantages (None: dropped)."""
    advantages = group_advantages(
        [[s.reward for s in group] for group in groups], norm_by_std, drop_constant
    )
    inputs = [
        datum_inputs(sample, advantage)
        for group, group_adv in zip(groups, advantages, strict=True)
        if group_adv is not None
        for sample, advantage in zip(group, group_adv, strict=True)
    ]
    return inputs, advantages

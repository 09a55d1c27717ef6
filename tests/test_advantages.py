"""``grpo_drop_constant``: groups whose responses all scored alike leave the policy update.

Checked through verl 0.6.1's own loss (``compute_policy_loss_vanilla``, token-mean) and its
autograd gradient, against the same loss on a batch that never held those groups."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rlvr.train import advantages

# three groups of four: scores that differ, all wrong, all right
SCORES = [1.0, 0.0, 1.0, 0.0] + [0.0] * 4 + [1.0] * 4
INDEX = np.array(["a"] * 4 + ["b"] * 4 + ["c"] * 4, dtype=object)
LENGTHS = [3, 5, 4, 2, 5, 5, 1, 3, 2, 4, 5, 5]
VARIED = slice(0, 4)
LOSS_CONFIG = OmegaConf.create(
    {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0}
)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    mask = torch.zeros(len(SCORES), 5)
    rewards = torch.zeros(len(SCORES), 5)
    for row, (score, length) in enumerate(zip(SCORES, LENGTHS, strict=True)):
        mask[row, :length] = 1
        rewards[row, length - 1] = score
    return rewards, mask


def _loss_and_grad(adv: torch.Tensor, mask: torch.Tensor, log_prob: torch.Tensor):
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    log_prob = log_prob.clone().requires_grad_(True)
    old = (log_prob + 0.05 * torch.sin(torch.arange(log_prob.numel()).view_as(log_prob))).detach()
    loss = compute_policy_loss_vanilla(old, log_prob, adv, mask, "token-mean", LOSS_CONFIG)[0]
    loss.backward()
    return loss.detach(), log_prob.grad


def test_dropped_groups_contribute_nothing() -> None:
    rewards, mask = _batch()
    log_prob = torch.randn(mask.shape, generator=torch.Generator().manual_seed(0))
    adv, _ = advantages.grpo_drop_constant(rewards, mask, INDEX, OmegaConf.create({}))
    assert mask[4:].sum() == 0 and adv[4:].abs().sum() == 0
    loss, grad = _loss_and_grad(adv, mask, log_prob)
    # the same loss on a batch of the varied group alone, with verl's plain GRPO advantages
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards_v, mask_v = _batch()
    alone_adv, _ = compute_grpo_outcome_advantage(rewards_v[VARIED], mask_v[VARIED], INDEX[VARIED])
    alone_loss, alone_grad = _loss_and_grad(alone_adv, mask_v[VARIED], log_prob[VARIED])
    torch.testing.assert_close(loss, alone_loss)
    torch.testing.assert_close(grad[VARIED], alone_grad)
    assert grad[4:].abs().sum() == 0


def test_plain_grpo_dilutes_the_varied_groups() -> None:
    """The negative control: verl's own GRPO keeps the agreeing groups in the denominator, so
    the varied group's gradient comes out smaller, by its share of the batch's tokens."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards, mask = _batch()
    log_prob = torch.randn(mask.shape, generator=torch.Generator().manual_seed(0))
    adv, _ = compute_grpo_outcome_advantage(rewards, mask, INDEX)
    _, grad = _loss_and_grad(adv, mask, log_prob)
    rewards, mask_dropped = _batch()
    adv_dropped, _ = advantages.grpo_drop_constant(rewards, mask_dropped, INDEX)
    _, grad_dropped = _loss_and_grad(adv_dropped, mask_dropped, log_prob)
    share = sum(LENGTHS[VARIED]) / sum(LENGTHS)
    torch.testing.assert_close(grad[VARIED], grad_dropped[VARIED] * share)


def test_varied_groups_and_single_response_groups() -> None:
    scores = torch.tensor([0.1, 0.1 + 1e-9, 0.1, 0.5, 0.7])
    index = np.array(["x", "x", "y", "z", "z"], dtype=object)
    assert advantages.varied_groups(scores, index).tolist() == [0, 0, 0, 1, 1]


def test_register_refuses_a_verl_that_copies_the_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.trainer.ppo import core_algos

    advantages.register()
    assert (
        core_algos.get_adv_estimator_fn(advantages.DROP_CONSTANT) is advantages.grpo_drop_constant
    )
    monkeypatch.setattr(advantages, "_PASSES_BATCH_MASK", "a line verl does not have")
    with pytest.raises(RuntimeError, match="cannot drop groups"):
        advantages.register()


def test_a_batch_where_every_group_agrees_is_left_whole() -> None:
    """Zeroing every row's mask made verl's compute_data_metrics fail on an empty selection
    (a 4-group CPU batch where all groups agreed, step 8): such a batch keeps its mask, and its
    advantages are exactly 0, which the recipes' actor reads as "skip the update"."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards, mask = _batch()
    rewards, mask, index = rewards[4:], mask[4:], INDEX[4:]  # the two constant groups
    before = mask.clone()
    adv, _ = advantages.grpo_drop_constant(rewards, mask, index)
    assert torch.equal(mask, before)
    torch.testing.assert_close(adv, compute_grpo_outcome_advantage(rewards, before, index)[0])
    assert not adv.any()
    valid = torch.masked_select(adv, mask.bool())
    assert valid.numel() > 0  # what compute_data_metrics reduces with torch.max

"""Advantage estimators the objective presets can name (``algorithm.adv_estimator``), registered
with verl 0.6.1's own registry (``core_algos.register_adv_est``) by the recipes' TaskRunner
(``rlvr.train.trainer``).

``grpo_drop_constant``: GRPO's advantages (verl's ``compute_grpo_outcome_advantage``), with the
groups whose responses all scored alike dropped from the policy update: the TuFT Countdown
guide's "if sigma is ~0, the prompt is skipped" (https://github.com/agentscope-ai/TuFT) and
tinker-cookbook's ``remove_constant_reward_groups``. Such a group's advantages are already 0,
but under ``token-mean`` its tokens still count in the loss's denominator (and in the KL and
entropy terms), shrinking every other group's weight by the share of agreeing groups. verl's
main trainer cannot drop rows (``filter_groups`` is recipe/dapo's); this estimator zeroes the
dropped rows' ``response_mask`` instead, which every term of the actor's loss is masked and
averaged by. verl 0.6.1 hands a registered estimator the batch's own ``response_mask`` tensor
(``ray_trainer.compute_advantage``: ``"response_mask": data.batch["response_mask"]``), so the
mask is changed in place; ``register`` refuses a verl that no longer does that.
Response-length metrics read the attention mask, not this one, so they still count every row.
verl's actor weighs micro batches by rows, not tokens, which would give kept tokens unequal
weights and can fail on a micro batch of dropped rows only: the recipes' actor
(``rlvr.train.token_mean``) makes the loss the token mean over the kept tokens of the mini batch.
A batch in which every group agrees keeps its mask, gets advantages of exactly 0, and its update
is skipped (logged as ``actor/skipped_update``).
"""

from __future__ import annotations

from typing import Any

from rlvr.common.groups import ALIKE, DROP_CONSTANT, varied_groups
from rlvr.common.verl_guards import require_source

__all__ = ["ALIKE", "DROP_CONSTANT", "grpo_drop_constant", "register", "varied_groups"]
_PASSES_BATCH_MASK = '"response_mask": data.batch["response_mask"]'


def grpo_drop_constant(
    token_level_rewards: Any,
    response_mask: Any,
    index: Any,
    config: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """verl's GRPO advantages; rows of constant groups get advantage 0 and a zero mask."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    norm_by_std = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    advantages, returns = compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=index,
        norm_adv_by_std_in_grpo=norm_by_std,
    )
    keep = varied_groups(token_level_rewards.sum(dim=-1), index).unsqueeze(-1)
    if not keep.any():
        # Nothing to learn from: the mask stays whole (an all-zero mask would leave verl's
        # metrics nothing to reduce: compute_data_metrics' torch.max of no advantages raises),
        # and the advantages are exactly 0 (equal scores can leave a rounding's worth), which is
        # how the recipes' actor (rlvr.train.token_mean) knows to skip the update.
        return advantages * 0.0, returns * 0.0
    response_mask.mul_(keep.to(response_mask.dtype))  # in place: the batch's own mask
    return advantages * keep, returns * keep


def register() -> None:
    """Register the estimators with verl (idempotent); refuse a verl that would not see the
    dropped rows' mask (see the module docstring)."""
    from verl.trainer.ppo import core_algos, ray_trainer

    require_source(
        ray_trainer.compute_advantage,
        _PASSES_BATCH_MASK,
        f"rlvr.train.advantages: {DROP_CONSTANT} cannot drop groups with this verl",
    )
    if core_algos.ADV_ESTIMATOR_REGISTRY.get(DROP_CONSTANT) is not grpo_drop_constant:
        core_algos.register_adv_est(DROP_CONSTANT)(grpo_drop_constant)

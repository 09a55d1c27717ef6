"""GRPO's group filter, shared by the verl recipes (``rlvr.train.advantages``'
``grpo_drop_constant``) and the Tinker loop (``rlvr.tinker.datums``): a group whose responses
all scored alike carries no learning signal and is dropped from the update (the TuFT guide's
"if sigma is ~0, the prompt is skipped"; tinker-cookbook's ``remove_constant_reward_groups``)."""

from __future__ import annotations

from typing import Any

#: ``algorithm.adv_estimator`` of GRPO with the filter (registered with verl by rlvr.train).
DROP_CONSTANT = "grpo_drop_constant"
#: Scores closer than this are alike (rewards are sums of a few floats).
ALIKE = 1e-6


def varied_groups(scores: Any, index: Any) -> Any:
    """1.0 for each row whose group (same ``index``) has scores that differ, else 0.0."""
    import torch

    keep = torch.zeros_like(scores)
    groups: dict[Any, list[int]] = {}
    for row, uid in enumerate(index):
        groups.setdefault(uid, []).append(row)
    for rows in groups.values():
        values = scores[rows]
        if len(rows) > 1 and float(values.max() - values.min()) > ALIKE:
            keep[rows] = 1.0
    return keep

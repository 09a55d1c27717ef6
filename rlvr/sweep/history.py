"""One run's verdict from its per-step records: final reward, best validation, collapse.

The records come from the run's ``metrics.jsonl`` (``rlvr.report.metrics_log.read_steps``), so
nothing is re-run to score a point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlvr.report.metrics_log import StepRecord

REWARD_KEY = "critic/score/mean"  # mean sequence reward of the step's rollouts
# A run whose loss or gradient goes non-finite has collapsed whatever its reward says.
HEALTH_KEYS = (REWARD_KEY, "actor/pg_loss", "actor/grad_norm", "actor/entropy")


@dataclass
class RunSummary:
    steps: int  # training steps logged
    final_reward: float | None  # mean reward of the last ``last_k`` steps
    peak_reward: float | None  # best moving average (see summarise_history)
    best_val: float | None  # best validation score after training began
    initial_val: float | None  # validation before training (step 0), when run
    collapsed: bool
    collapse_reason: str
    rewards: list[tuple[int, float]]  # (step, reward) for the curves


def validation_score(metrics: dict[str, float]) -> float | None:
    """The step's headline validation metric: verl's ``val-core/<source>/<var>/mean@N``."""
    scores = [
        value for key, value in metrics.items() if key.startswith("val-core/") and "/mean@" in key
    ]
    return sum(scores) / len(scores) if scores else None


def summarise_history(
    records: Sequence[StepRecord],
    last_k: int = 5,
    collapse_drop: float = 0.5,
    min_peak: float = 0.05,
) -> RunSummary:
    """Final reward, best validation, and whether the run collapsed.

    Collapsed: a loss, gradient norm, entropy or reward went NaN/inf, or the reward's moving
    average (over ``min(last_k, steps // 3)`` steps) ended below ``(1 - collapse_drop)`` of its
    peak (peaks under ``min_peak`` are noise, not a peak to fall from).
    """
    rewards = [(r.step, r.metrics[REWARD_KEY]) for r in records if REWARD_KEY in r.metrics]
    values = [reward for _, reward in rewards]
    non_finite = _first_non_finite(records)
    if non_finite is not None:
        finite = [r for r in values if math.isfinite(r)]
        final, peak, collapsed = None, (max(finite) if finite else None), True
        step, key, value = non_finite
        reason = f"{key} is {value} at step {step}"
    else:
        final, peak, collapsed, reason = _reward_trend(values, last_k, collapse_drop, min_peak)
    scores = [(r.step, validation_score(r.metrics)) for r in records]
    after_start = [score for step, score in scores if step > 0 and score is not None]
    return RunSummary(
        steps=len(rewards),
        final_reward=final,
        peak_reward=peak,
        best_val=max(after_start) if after_start else None,
        initial_val=next((score for step, score in scores if step == 0), None),
        collapsed=collapsed,
        collapse_reason=reason,
        rewards=rewards,
    )


def _first_non_finite(records: Sequence[StepRecord]) -> tuple[int, str, float] | None:
    """The first (step, key, value) among HEALTH_KEYS that is NaN or infinite."""
    for record in records:
        for key in HEALTH_KEYS:
            value = record.metrics.get(key)
            if value is not None and not math.isfinite(value):
                return record.step, key, value
    return None


def _reward_trend(
    values: Sequence[float], last_k: int, collapse_drop: float, min_peak: float
) -> tuple[float | None, float | None, bool, str]:
    """(final reward, peak moving average, collapsed, why) of a finite reward curve."""
    window = max(1, min(last_k, len(values)))
    final = sum(values[-window:]) / window if values else None
    # Collapse compares short moving averages (a third of the run at most), so a spike and fall
    # inside the last K steps of a short run still shows.
    short = max(1, min(last_k, len(values) // 3))
    moving = [sum(values[i - short : i]) / short for i in range(short, len(values) + 1)]
    if not moving:
        return final, None, False, ""
    peak, end = max(moving), moving[-1]
    collapsed = peak >= min_peak and end < (1.0 - collapse_drop) * peak
    reason = f"reward fell from {peak:.3f} to {end:.3f}" if collapsed else ""
    return final, peak, collapsed, reason

"""Alarm rules on verl 0.6.1's rollout-correction metrics: the rollout engine's log probs against
the trainer's on the same sampled tokens (``rollout_corr/*``, logged when
``actor_rollout_ref.rollout.calculate_log_probs`` is on: configs/grpo.yaml).

verl computes them in ``verl/trainer/ppo/rollout_corr_helper.py`` (``compute_offpolicy_metrics``)
in the trainer (``ray_trainer.py`` ``fit``) and again in the actor's update (``dp_actor.py``
``update_policy``). Per sequence, ``log_ppl_diff`` is the rollout's mean token log prob minus the
trainer's; ``log_ppl_abs_diff`` its batch mean of absolute values; ``kl`` the mean of
``log p_rollout - log p_train`` over response tokens; ``k3_kl`` the K3 estimator
``mean(r - log r - 1)``, ``r = p_train / p_rollout``, never negative; ``rollout_log_ppl`` and
``training_log_ppl`` each policy's mean negative log prob of the sampled tokens. Reading:
https://verl.readthedocs.io/en/latest/algo/rollout_corr.html (docs/algo/rollout_corr.md at v0.6.1).

Thresholds are named constants; each comment says why that value (docs/REPORT.md explains each
alarm and what to try).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import spearmanr

from rlvr.report.alarms.verdict import FIRED, NO_DATA, OK, Alarm
from rlvr.report.records import RunRecords

LOG_PPL_ABS_DIFF = "rollout_corr/log_ppl_abs_diff"
K3_KL = "rollout_corr/k3_kl"
KL = "rollout_corr/kl"
ROLLOUT_LOG_PPL = "rollout_corr/rollout_log_ppl"
TRAINING_LOG_PPL = "rollout_corr/training_log_ppl"
ACTOR_GRAD_NORM = "actor/grad_norm"
ACTOR_LR = "actor/lr"
ACTOR_KL_LOSS = "actor/kl_loss"

# --- thresholds ---------------------------------------------------------------------------------

#: verl's rollout-correction guide flags ``abs(rollout_corr/kl) > 0.1`` as "significant
#: off-policy gap" (its check_rollout_correction_health example); the same bound for the K3
#: estimate of the same divergence.
KL_MAX = 0.1
#: A mean log-perplexity gap of 0.1 is the two engines disagreeing on a sequence's perplexity by
#: 10% (e^0.1 = 1.105): far beyond bf16 numerics between identical weights (the recorded CPU runs
#: read 1e-6), and verl's geometric rejection presets already drop sequences off by 0.1% a token.
LOG_PPL_ABS_DIFF_MAX = 0.1
#: The metrics the mismatch alarm reads, each with its limit (``kl`` by absolute value).
MISMATCH_LIMITS: dict[str, float] = {
    LOG_PPL_ABS_DIFF: LOG_PPL_ABS_DIFF_MAX,
    K3_KL: KL_MAX,
    KL: KL_MAX,
}
#: Steps a trend is judged on: under 6, a third of the series is one or two noisy steps.
TREND_MIN_STEPS = 6
#: "Rises step after step": Spearman's rank correlation of the value with the step at least 0.8
#: (a flat series with noise scores near 0; one spike does not make a trend).
TREND_MIN_CORRELATION = 0.8
#: ...and the last third's median at least 4x the first third's: a gap that quadrupled is growing,
#: not wandering within the engines' numerics.
RISE_FACTOR = 4.0
#: A rise counts for the mismatch alarm once the gap is 1% in log perplexity (or 0.01 in KL):
#: below it, 10x growth of 1e-6 float noise is no gap to act on.
RISE_FLOOR = 0.01
#: A rollout stuck at the base model shows a smaller gap (the actor's drift from the base, the
#: size of actor/kl_loss: 1e-3 to 1e-2 in a few dozen steps), so that rule's floor is lower,
#: still 1000x the recorded CPU runs' numerics.
STUCK_FLOOR = 0.001
#: "The rollout stands still": its own log-perplexity moved less than a third as much as the
#: trainer's on the same samples, while the gap between them grew.
STILL_FRACTION = 1 / 3


@dataclass(frozen=True)
class Rise:
    """A series' first and last thirds (medians) and its rank correlation with the step."""

    first: float
    last: float
    correlation: float

    def rising(self, floor: float) -> bool:
        steady = self.correlation >= TREND_MIN_CORRELATION
        return steady and self.last >= max(RISE_FACTOR * self.first, floor)


def rise(points: Sequence[tuple[int, float]]) -> Rise | None:
    """The trend of a metric's finite points, or None when under TREND_MIN_STEPS."""
    if len(points) < TREND_MIN_STEPS:
        return None
    steps, values = zip(*points, strict=True)
    third = len(values) // 3
    # a constant series has no rank correlation (scipy warns and returns nan): no trend
    rho = 0.0 if len(set(values)) == 1 else float(spearmanr(steps, values).statistic)
    rho = 0.0 if math.isnan(rho) else rho
    first, last = statistics.median(values[:third]), statistics.median(values[-third:])
    return Rise(first, last, rho)


def _drift(points: Sequence[tuple[int, float]]) -> float:
    third = max(len(points) // 3, 1)
    first = statistics.median(v for _, v in points[:third])
    return abs(statistics.median(v for _, v in points[-third:]) - first)


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def _magnitude(records: RunRecords, key: str) -> list[tuple[int, float]]:
    points = records.finite(key)
    return [(s, abs(v)) for s, v in points] if key == KL else points


def rollout_training_mismatch(records: RunRecords) -> Alarm:
    key, title = "rollout_mismatch", "rollout/training mismatch"
    seen: list[str] = []
    steps: set[int] = set()
    logged = False
    for metric, limit in MISMATCH_LIMITS.items():
        points = _magnitude(records, metric)
        logged = logged or bool(points)
        name = f"|{metric}|" if metric == KL else metric
        over = [(s, v) for s, v in points if v > limit]
        if over:
            steps |= {s for s, _ in over}
            top = max(v for _, v in over)
            seen.append(f"{name} up to {_fmt(top)} (above {limit:g})")
        trend = rise(points)
        if trend is not None and trend.rising(RISE_FLOOR):
            steps |= {s for s, v in points if v >= RISE_FACTOR * trend.first and v >= RISE_FLOOR}
            seen.append(
                f"{name} rose steadily from {_fmt(trend.first)} to {_fmt(trend.last)} "
                f"(medians of the first and last thirds; rank correlation with the step "
                f"{trend.correlation:.2f})"
            )
    if not logged:
        return Alarm(
            key,
            title,
            NO_DATA,
            "no rollout_corr/* logged (set actor_rollout_ref.rollout.calculate_log_probs=true)",
        )
    if not seen:
        top = max(v for m in MISMATCH_LIMITS for _, v in _magnitude(records, m))
        return Alarm(
            key,
            title,
            OK,
            f"rollout_corr log-ppl gap and KL at most {_fmt(top)}, below their limits "
            f"({LOG_PPL_ABS_DIFF_MAX:g}, {KL_MAX:g}) and not rising",
        )
    return Alarm(
        key,
        title,
        FIRED,
        "the rollout engine and the trainer disagree on the sampled tokens: " + "; ".join(seen),
        "read docs/REPORT.md, 'rollout/training mismatch': check the rollout and actor dtypes "
        "and the vLLM version; if the policy alarm fired too, the weights do not reach the "
        "rollout; otherwise turn on verl's truncated importance sampling "
        "(algorithm.rollout_correction.rollout_is=token, rollout_is_threshold=2.0)",
        tuple(sorted(steps)),
    )


def _actor_moves(records: RunRecords) -> str | None:
    """Why the actor counts as updating (non-zero grad norms, a non-zero learning rate), or
    None when it does not or the metrics are missing."""
    norms = records.finite(ACTOR_GRAD_NORM)
    moving = [v for _, v in norms if v > 0]
    if not norms or len(moving) * 2 < len(norms):
        return None
    rates = records.finite(ACTOR_LR)
    if rates and rates[-1][1] <= 0:
        return None
    lr = f", {ACTOR_LR} {_fmt(rates[-1][1])}" if rates else ""
    return f"{ACTOR_GRAD_NORM} > 0 at {len(moving)} of {len(norms)} steps{lr}"


def policy_not_reaching_rollout(records: RunRecords) -> Alarm:
    key, title = "policy_not_in_rollout", "policy not reaching the rollout"
    metric = next((m for m in (K3_KL, LOG_PPL_ABS_DIFF) if records.finite(m)), None)
    rollout_ppl, training_ppl = records.finite(ROLLOUT_LOG_PPL), records.finite(TRAINING_LOG_PPL)
    points = records.finite(metric) if metric else []
    trend = rise(points)
    if trend is None or len(rollout_ppl) < TREND_MIN_STEPS or len(training_ppl) < TREND_MIN_STEPS:
        return Alarm(
            key,
            title,
            NO_DATA,
            f"{len(points)} steps of {metric or K3_KL} with the rollout's and trainer's "
            f"log-perplexity; need {TREND_MIN_STEPS} (actor_rollout_ref.rollout."
            "calculate_log_probs=true)",
        )
    moves = _actor_moves(records)
    rollout_drift, training_drift = _drift(rollout_ppl), _drift(training_ppl)
    gap = f"{metric} from {_fmt(trend.first)} to {_fmt(trend.last)} (first and last thirds)"
    if not trend.rising(STUCK_FLOOR):
        return Alarm(key, title, OK, f"{gap}: no steady rise")
    if moves is None:
        return Alarm(key, title, OK, f"{gap}, but the actor did not update")
    if rollout_drift > STILL_FRACTION * training_drift:
        return Alarm(
            key,
            title,
            OK,
            f"{gap}, and the rollout moved with the trainer ({ROLLOUT_LOG_PPL} by "
            f"{_fmt(rollout_drift)}, {TRAINING_LOG_PPL} by {_fmt(training_drift)})",
        )
    drift = records.finite(ACTOR_KL_LOSS)
    beside = (
        f"; the actor's drift from the reference ({ACTOR_KL_LOSS}) reached {_fmt(drift[-1][1])}"
        if drift
        else ""
    )
    return Alarm(
        key,
        title,
        FIRED,
        f"{metric} grew steadily from {_fmt(trend.first)} to {_fmt(trend.last)} while the actor "
        f"updated ({moves}), yet the rollout's own {ROLLOUT_LOG_PPL} moved only "
        f"{_fmt(rollout_drift)} against {_fmt(training_drift)} for the trainer's: the rollout "
        f"keeps sampling an older policy{beside}",
        "the updated weights do not reach the rollout engine: with LoRA, check that vLLM "
        "receives the adapter (actor_rollout_ref.rollout.load_format=safetensors, "
        "layered_summon, verl's LoRA notes) and that the adapter's weights change between "
        "checkpoints; compare a checkpoint's greedy answers with the rollout dumps'",
        tuple(s for s, v in points if v >= max(RISE_FACTOR * trend.first, STUCK_FLOOR)),
    )

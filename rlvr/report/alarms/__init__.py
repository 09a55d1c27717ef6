"""Health alarms over a run's records: each a small pure function returning an :class:`Alarm`.

The rules live by what they read: ``metric_rules`` on the step metrics verl logs,
``mismatch_rules`` on its rollout-correction metrics (``rollout_corr/*``), ``rollout_rules`` on
its rollout dumps' scores and ``answer_rules`` on the dumps' correctness, format and truncation;
``verdict`` holds the type they return. This module is the registry the report runs, in the
order it lists them; docs/REPORT.md explains each alarm.
"""

from __future__ import annotations

from collections.abc import Callable

from rlvr.report.alarms.answer_rules import (
    CUT_CORRECT_SHARE,
    HIDDEN_SHARE,
    PHANTOM_MAX,
    answers_cut_or_unparsed,
    phantom_advantages,
)
from rlvr.report.alarms.metric_rules import (
    ENTROPY,
    ENTROPY_FALL_FRACTION,
    ENTROPY_FLOOR,
    GRAD_NORM,
    LENGTH,
    LENGTH_CLIP,
    LENGTH_CLIP_MAX,
    PG_CLIPFRAC,
    SCORE,
    entropy_collapse,
    grad_norm_spikes,
    length_collapse,
    length_runaway,
    pg_clip_high,
    validation_divergence,
)
from rlvr.report.alarms.mismatch_rules import (
    K3_KL,
    KL,
    KL_MAX,
    LOG_PPL_ABS_DIFF,
    LOG_PPL_ABS_DIFF_MAX,
    policy_not_reaching_rollout,
    rollout_training_mismatch,
)
from rlvr.report.alarms.rollout_rules import (
    HACKING_MIN_COUNT,
    HACKING_MIN_SHARE,
    ZERO_SPREAD_MAX,
    above_group_mean,
    reward_hacking,
    zero_spread_groups,
)
from rlvr.report.alarms.verdict import FIRED, NO_DATA, OK, Alarm
from rlvr.report.records import RunRecords

#: Every check, in the order the report lists them.
CHECKS: tuple[Callable[[RunRecords], Alarm], ...] = (
    entropy_collapse,
    zero_spread_groups,
    length_collapse,
    length_runaway,
    pg_clip_high,
    grad_norm_spikes,
    validation_divergence,
    reward_hacking,
    rollout_training_mismatch,
    policy_not_reaching_rollout,
    answers_cut_or_unparsed,
    phantom_advantages,
)


def run_checks(records: RunRecords) -> list[Alarm]:
    return [check(records) for check in CHECKS]


# The metric names and thresholds the report's figures and tables draw (figures.py, markdown.py)
# and the tests pin.
__all__ = [
    "CHECKS",
    "CUT_CORRECT_SHARE",
    "ENTROPY",
    "ENTROPY_FALL_FRACTION",
    "ENTROPY_FLOOR",
    "FIRED",
    "GRAD_NORM",
    "HACKING_MIN_COUNT",
    "HACKING_MIN_SHARE",
    "HIDDEN_SHARE",
    "K3_KL",
    "KL",
    "KL_MAX",
    "LENGTH",
    "LENGTH_CLIP",
    "LENGTH_CLIP_MAX",
    "LOG_PPL_ABS_DIFF",
    "LOG_PPL_ABS_DIFF_MAX",
    "NO_DATA",
    "OK",
    "PG_CLIPFRAC",
    "PHANTOM_MAX",
    "SCORE",
    "ZERO_SPREAD_MAX",
    "Alarm",
    "above_group_mean",
    "answers_cut_or_unparsed",
    "entropy_collapse",
    "grad_norm_spikes",
    "length_collapse",
    "length_runaway",
    "pg_clip_high",
    "phantom_advantages",
    "policy_not_reaching_rollout",
    "reward_hacking",
    "rollout_training_mismatch",
    "run_checks",
    "validation_divergence",
    "zero_spread_groups",
]

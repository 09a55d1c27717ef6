"""Alarm rules on verl's rollout dumps (trainer.rollout_data_dir): groups that give GRPO no
gradient, and responses matching the task's reward-hacking patterns. Where a step was not
dumped, the zero-spread rule falls back on the step metrics (rlvr/report/records.py).

Thresholds are named constants; each comment says why that value (docs/REPORT.md explains
each alarm and what to try).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlvr.report.alarms.verdict import FIRED, NO_DATA, OK, Alarm, trim
from rlvr.report.records import (
    MIN_JUDGED_GROUPS,
    Rollout,
    RunRecords,
    group_stats,
    judged_zero_spread,
    scores_by_prompt,
)

#: "Most groups": above half, GRPO learns from fewer than half the prompts of the batch.
ZERO_SPREAD_MAX = 0.5
#: One reinforced response in twenty matching a loophole is enough to grow. Reinforced: scoring
#: above its group's mean, the responses GRPO pushes up; a pattern earning only what its group's
#: honest answers earn (format credit among wrong answers) gets no push and is not counted.
HACKING_MIN_SHARE = 0.05
#: ...and at least two of them, so that a single odd response does not fire on a small batch.
HACKING_MIN_COUNT = 2
#: Or once half the rewarded responses match: the loophole has spread through whole groups.
SATURATED = 0.5


def zero_spread_groups(records: RunRecords) -> Alarm:
    key, title = "zero_spread", "most groups with zero spread"
    points = judged_zero_spread(records)
    if not points:
        return Alarm(
            key,
            title,
            NO_DATA,
            f"no batch of all-equal scores, and under {MIN_JUDGED_GROUPS} groups dumped",
            figure="groups",
        )
    high = [(step, share) for step, share, _ in points if share > ZERO_SPREAD_MAX]
    if not high:
        worst = max(share for _, share, _ in points)
        return Alarm(
            key,
            title,
            OK,
            f"at most {worst:.0%} of groups had zero spread (windows of {MIN_JUDGED_GROUPS}+)",
            figure="groups",
        )
    scores = _constant_scores(records, [step for step, _ in high])
    return Alarm(
        key,
        title,
        FIRED,
        f"over {ZERO_SPREAD_MAX:.0%} of the groups scored alike (up to "
        f"{max(share for _, share in high):.0%}; common scores: {scores})",
        "such groups give no gradient. All 0: the data is too hard for the model (probe it with "
        "eval analyse; easier data, SFT first, or a larger model). All 1: too easy (harder "
        "data). All at the format score: the model only earns partial credit; raise "
        "rollout.n or the temperature for more varied groups",
        tuple(step for step, _ in high),
        "groups",
    )


def _constant_scores(records: RunRecords, steps: Sequence[int]) -> str:
    counts: dict[float, int] = {}
    for step in steps:
        for score, count in group_stats(records.rollouts.get(step, ())).constant_scores.items():
            counts[score] = counts.get(score, 0) + count
    if not counts:  # known from the metrics only: the batch's one score
        for step in steps:
            for record in records.steps:
                if record.step == step and "critic/score/max" in record.metrics:
                    score = round(record.metrics["critic/score/max"], 6)
                    counts[score] = counts.get(score, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])[:3]
    return ", ".join(f"{score:g}" for score, _ in ranked) or "unknown"


def reward_hacking(records: RunRecords) -> Alarm:
    key, title = "reward_hacking", "suspected reward hacking"
    task = records.task
    if task is None or not task.hacking_patterns:
        why = "task unknown (pass --task)" if task is None else f"{task.name} defines no patterns"
        return Alarm(key, title, NO_DATA, why)
    if not records.rollouts:
        return Alarm(key, title, NO_DATA, "no rollout dumps (trainer.rollout_data_dir)")
    fired_steps: list[int] = []
    counts: dict[str, int] = {}
    examples: dict[str, str] = {}
    worst = worst_rewarded = 0.0
    for step, rollouts in sorted(records.rollouts.items()):
        rewarded = [r for r in rollouts if r.score > 0]
        matched = {id(r) for r in rewarded if _matched(task.hacking_patterns, r, counts, examples)}
        reinforced = above_group_mean(rollouts)
        hits = sum(id(r) in matched for r in reinforced)
        share = hits / len(reinforced) if reinforced else 0.0
        rewarded_share = len(matched) / len(rewarded) if rewarded else 0.0
        worst, worst_rewarded = max(worst, share), max(worst_rewarded, rewarded_share)
        growing = hits >= HACKING_MIN_COUNT and share >= HACKING_MIN_SHARE
        # a loophole every response of its groups uses is no longer above any group's mean
        spread = len(matched) >= HACKING_MIN_COUNT and rewarded_share >= SATURATED
        if growing or spread:
            fired_steps.append(step)
    if not fired_steps:
        return Alarm(
            key,
            title,
            OK,
            f"at most {worst:.0%} of reinforced responses (above their group's mean) match a "
            f"{task.name} pattern ({len(records.rollouts)} dumped steps)",
        )
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    described = {p.name: p.description for p in task.hacking_patterns}
    seen = "; ".join(f"{name} ({described[name]}): {count}" for name, count in ranked)
    return Alarm(
        key,
        title,
        FIRED,
        f"up to {worst:.0%} of reinforced responses (above their group's mean), and "
        f"{worst_rewarded:.0%} of those with score > 0, match {task.name} patterns, counted over "
        f"all dumps: {seen}",
        "read the examples and the rollouts: if the pattern earns reward it should not, tighten "
        f"the reward (rewards/{task.name}.py) so it scores 0, and restart from a checkpoint "
        "before it spread",
        tuple(fired_steps),
        examples=tuple(f"[{name}] {examples[name]}" for name, _ in ranked),
    )


def above_group_mean(rollouts: Sequence[Rollout]) -> list[Rollout]:
    """The responses a group baseline gives a positive advantage: scoring above the mean of their
    group (a step's responses to one prompt), or, alone in it, above 0 (verl's GRPO baseline for
    a group of one is 0)."""
    groups = scores_by_prompt(rollouts)
    baselines = {p: math.fsum(s) / len(s) if len(s) > 1 else 0.0 for p, s in groups.items()}
    return [r for r in rollouts if r.score > baselines[r.prompt] + 1e-9]


def _matched(
    patterns: Sequence[object], rollout: Rollout, counts: dict[str, int], examples: dict[str, str]
) -> bool:
    hit = False
    for pattern in patterns:
        name = getattr(pattern, "name", "")
        matches = getattr(pattern, "matches", None)
        try:
            found = bool(matches(rollout.prompt, rollout.response)) if callable(matches) else False
        except Exception:  # a pattern must not stop the report; it simply does not match
            found = False
        if found:
            hit = True
            counts[name] = counts.get(name, 0) + 1
            examples.setdefault(name, f"step {rollout.step}: {trim(rollout.response)}")
    return hit

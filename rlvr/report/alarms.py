"""Health alarms over a run's records: each a small pure function returning an :class:`Alarm`.

Thresholds are named constants; each comment says why that value. The healthy ranges come from
docs/TRAINING.md ("Reading the metrics") and the seed study it cites; docs/REPORT.md explains
each alarm and what to try. Metric names are verl 0.6.1's (``trainer/ppo/metric_utils.py``,
``workers/actor/dp_actor.py``, ``trainer/ppo/ray_trainer.py``), as recorded in metrics.jsonl.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rlvr.report.records import (
    MIN_JUDGED_GROUPS,
    Rollout,
    RunRecords,
    group_stats,
    judged_zero_spread,
    scores_by_prompt,
)

SCORE = "critic/score/mean"
ENTROPY = "actor/entropy"
LENGTH = "response_length/mean"
LENGTH_CLIP = "response_length/clip_ratio"
PG_CLIPFRAC = "actor/pg_clipfrac"
GRAD_NORM = "actor/grad_norm"

FIRED, OK, NO_DATA = "fired", "ok", "no data"

# --- thresholds ---------------------------------------------------------------------------------

#: Steps whose median is a run's starting response length: one step is noisy, and by step 3
#: a collapse or runaway has usually not started yet.
BASELINE_STEPS = 3
#: docs/TRAINING.md and the seed study: entropy "below ~0.01 is collapse" (mode collapse: the
#: policy samples one answer, so every group has zero spread).
ENTROPY_FLOOR = 0.01
#: Healthy entropy is stable or slowly drifting (the seed: 0.2 -> 0.3); a fall to under a fifth
#: of the first step's (the untrained policy on its own samples, averaged over every token of
#: the batch, so not noisy) is the policy turning deterministic, whatever the model's scale.
ENTROPY_FALL_FRACTION = 0.2
#: "Most groups": above half, GRPO learns from fewer than half the prompts of the batch.
ZERO_SPREAD_MAX = 0.5
#: A response that lost 70% of its tokens dropped its reasoning (docs: "a crash to short means
#: collapse"); ordinary GRPO length drift stays well inside that.
LENGTH_COLLAPSE_FRACTION = 0.3
#: Reasoning gets longer while a model learns, but tripling is verbose hacking or rambling
#: (docs: "a runaway means verbose hacking").
LENGTH_RUNAWAY_FACTOR = 3.0
#: Share of responses cut at max_response_length. A cut response has no final answer and scores
#: 0 whatever its reasoning; one in ten cut biases every group against long answers.
LENGTH_CLIP_MAX = 0.1
#: docs: actor/pg_clipfrac healthy is "small (a few %)"; 10% is over twice the top of that: the
#: update leaves the clip range for a tenth of the tokens.
PG_CLIPFRAC_MAX = 0.1
#: The seed's healthy grad norm band (0.05-0.2) spans 4x; 5x the recent median is outside it.
GRAD_SPIKE_FACTOR = 5.0
#: Recent median over this many earlier steps, once at least GRAD_MIN_HISTORY are known.
GRAD_WINDOW = 10
GRAD_MIN_HISTORY = 3
#: Validation falling 5 points below its best is beyond step-to-step noise of greedy validation on
#: a few hundred prompts (binomial standard error at most 0.035 at 200 prompts).
VAL_DROP_MIN = 0.05
#: Training reward level at a validation: the mean of this many training steps up to it.
TRAIN_WINDOW = 5
#: One reinforced response in twenty matching a loophole is enough to grow. Reinforced: scoring
#: above its group's mean, the responses GRPO pushes up; a pattern earning only what its group's
#: honest answers earn (format credit among wrong answers) gets no push and is not counted.
HACKING_MIN_SHARE = 0.05
#: ...and at least two of them, so that a single odd response does not fire on a small batch.
HACKING_MIN_COUNT = 2
#: Or once half the rewarded responses match: the loophole has spread through whole groups.
SATURATED = 0.5


@dataclass(frozen=True)
class Alarm:
    """One check's verdict: ``status`` is FIRED, OK or NO_DATA; ``steps`` where it fired."""

    key: str
    title: str
    status: str
    detail: str  # what was seen (or why it could not be judged)
    advice: str = ""  # what to try, when fired
    steps: tuple[int, ...] = ()
    figure: str = ""  # the figure that shows it (rlvr/report/figures.py)
    examples: tuple[str, ...] = field(default=(), compare=False)  # offending responses, trimmed

    @property
    def fired(self) -> bool:
        return self.status == FIRED


def _baseline(points: Sequence[tuple[int, float]]) -> float:
    return statistics.median(value for _, value in points[:BASELINE_STEPS])


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def entropy_collapse(records: RunRecords) -> Alarm:
    key, title = "entropy_collapse", "entropy collapse"
    points = records.finite(ENTROPY)
    if not points:
        return Alarm(key, title, NO_DATA, f"no {ENTROPY} logged", figure="entropy")
    start = points[0][1]
    floor = max(ENTROPY_FLOOR, ENTROPY_FALL_FRACTION * start)
    low = [(step, value) for step, value in points if value < floor]
    lowest = min(value for _, value in points)
    if not low:
        seen = f"{ENTROPY} from {_fmt(start)} to {_fmt(points[-1][1])} (lowest {_fmt(lowest)})"
        return Alarm(key, title, OK, seen, figure="entropy")
    return Alarm(
        key,
        title,
        FIRED,
        f"{ENTROPY} fell to {_fmt(lowest)}, below {_fmt(floor)} (the larger of "
        f"{ENTROPY_FLOOR:g} and {ENTROPY_FALL_FRACTION:g} x its first value {_fmt(start)})",
        "the policy has stopped exploring: lower the learning rate, add a small entropy bonus "
        "(actor.entropy_coeff ~0.001) or raise the rollout temperature; check that groups "
        "still disagree (zero-spread alarm) and that the data is not too easy",
        tuple(step for step, _ in low),
        "entropy",
    )


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


def length_collapse(records: RunRecords) -> Alarm:
    key, title = "length_collapse", "response-length collapse"
    points = records.finite(LENGTH)
    if len(points) <= BASELINE_STEPS:
        return Alarm(
            key,
            title,
            NO_DATA,
            f"{len(points)} steps of {LENGTH}; need more than {BASELINE_STEPS}",
            figure="length",
        )
    start = _baseline(points)
    short = [(s, v) for s, v in points[BASELINE_STEPS:] if v < LENGTH_COLLAPSE_FRACTION * start]
    if not short:
        lowest = min(v for _, v in points[BASELINE_STEPS:])
        return Alarm(
            key,
            title,
            OK,
            f"{LENGTH} started at {_fmt(start)} tokens (median of the first {BASELINE_STEPS} "
            f"steps), lowest after them {_fmt(lowest)}",
            figure="length",
        )
    return Alarm(
        key,
        title,
        FIRED,
        f"{LENGTH} fell to {_fmt(min(v for _, v in short))} tokens, under "
        f"{LENGTH_COLLAPSE_FRACTION:g} x its start {_fmt(start)}",
        "the model found a short answer that scores (read the rollouts: is it guessing, or "
        "copying a format?); check the reward-hacking alarm, lower the learning rate, and make "
        "the reward require the reasoning the task needs",
        tuple(step for step, _ in short),
        "length",
    )


def length_runaway(records: RunRecords) -> Alarm:
    key, title = "length_runaway", "response-length runaway or cut at the limit"
    points = records.finite(LENGTH)
    clipped = [(s, v) for s, v in records.finite(LENGTH_CLIP) if v > LENGTH_CLIP_MAX]
    if not points and not records.finite(LENGTH_CLIP):
        return Alarm(key, title, NO_DATA, f"no {LENGTH} or {LENGTH_CLIP} logged", figure="length")
    long: list[tuple[int, float]] = []
    start = _baseline(points) if len(points) > BASELINE_STEPS else None
    if start is not None:
        long = [(s, v) for s, v in points[BASELINE_STEPS:] if v > LENGTH_RUNAWAY_FACTOR * start]
    if not long and not clipped:
        top = max((v for _, v in records.finite(LENGTH_CLIP)), default=0.0)
        return Alarm(
            key,
            title,
            OK,
            f"{LENGTH_CLIP} at most {top:.0%}; length within {LENGTH_RUNAWAY_FACTOR:g} x its start",
            figure="length",
        )
    seen = []
    if long:
        seen.append(
            f"{LENGTH} grew to {_fmt(max(v for _, v in long))} tokens, over "
            f"{LENGTH_RUNAWAY_FACTOR:g} x its start {_fmt(start or 0)}"
        )
    if clipped:
        seen.append(
            f"{LENGTH_CLIP} up to {max(v for _, v in clipped):.0%} of responses cut at "
            f"max_response_length (above {LENGTH_CLIP_MAX:.0%})"
        )
    return Alarm(
        key,
        title,
        FIRED,
        "; ".join(seen),
        "cut responses score 0: raise data.max_response_length if the reasoning needs it; if "
        "the text rambles or repeats, lower the learning rate, check the reward-hacking alarm "
        "and consider a length penalty or a tighter output contract",
        tuple(sorted({s for s, _ in long} | {s for s, _ in clipped})),
        "length" if long else "clip",  # the figure that shows why it fired
    )


def pg_clip_high(records: RunRecords) -> Alarm:
    key, title = "pg_clipfrac", "PPO clip ratio high"
    points = records.finite(PG_CLIPFRAC)
    if not points:
        return Alarm(key, title, NO_DATA, f"no {PG_CLIPFRAC} logged", figure="clip")
    high = [(s, v) for s, v in points if v > PG_CLIPFRAC_MAX]
    top = max(v for _, v in points)
    if not high:
        return Alarm(key, title, OK, f"{PG_CLIPFRAC} at most {top:.1%}", figure="clip")
    return Alarm(
        key,
        title,
        FIRED,
        f"{PG_CLIPFRAC} up to {top:.1%} of tokens clipped (above {PG_CLIPFRAC_MAX:.0%})",
        "each update moves the policy too far from the one that sampled: lower the learning "
        "rate, use fewer ppo_epochs or larger ppo_mini_batch_size (fewer updates per batch)",
        tuple(s for s, _ in high),
        "clip",
    )


def grad_norm_spikes(records: RunRecords) -> Alarm:
    key, title = "grad_norm_spikes", "grad-norm spikes"
    points = records.series(GRAD_NORM)
    if not points:
        return Alarm(key, title, NO_DATA, f"no {GRAD_NORM} logged", figure="grad_norm")
    spikes: list[tuple[int, float, float]] = []
    history: list[float] = []  # finite, non-zero norms (0: a batch with no signal, not a level)
    for step, value in points:
        if not math.isfinite(value):
            spikes.append((step, value, math.nan))
            continue
        recent = history[-GRAD_WINDOW:]
        if len(recent) >= GRAD_MIN_HISTORY:
            level = statistics.median(recent)
            if value > GRAD_SPIKE_FACTOR * level:
                spikes.append((step, value, level))
        if value > 0:
            history.append(value)
    if not spikes:
        judged = "" if len(history) > GRAD_MIN_HISTORY else " (few steps to judge)"
        return Alarm(
            key,
            title,
            OK,
            f"{GRAD_NORM} within {GRAD_SPIKE_FACTOR:g} x its recent median{judged}",
            figure="grad_norm",
        )
    shown = ", ".join(
        f"{_fmt(value)} at step {step}" + (f" (median {_fmt(level)})" if level == level else "")
        for step, value, level in spikes[:4]
    )
    return Alarm(
        key,
        title,
        FIRED,
        f"{GRAD_NORM} over {GRAD_SPIKE_FACTOR:g} x the median of the previous "
        f"{GRAD_WINDOW} steps, or not finite: {shown}",
        "spikes often come before a collapse: lower the learning rate, check "
        "actor.grad_clip (1.0), and read that step's rollouts for odd responses",
        tuple(step for step, _, _ in spikes),
        "grad_norm",
    )


def _train_level(points: Sequence[tuple[int, float]], step: int) -> float:
    upto = [v for s, v in points if s <= step][-TRAIN_WINDOW:] or [points[0][1]]
    return sum(upto) / len(upto)


def validation_divergence(records: RunRecords) -> Alarm:
    key, title = "val_divergence", "validation diverging from training reward"
    val_key = records.val_key()
    val = records.finite(val_key) if val_key else []
    train = records.finite(SCORE)
    if len(val) < 2 or not train:
        return Alarm(
            key,
            title,
            NO_DATA,
            f"{len(val)} validation(s) and {len(train)} training steps; need 2 and 1",
            figure="reward",
        )
    diverged: list[tuple[int, float, int, float]] = []
    for j in range(1, len(val)):
        best_step, best = max(val[:j], key=lambda point: point[1])
        step, value = val[j]
        falls = value <= best - VAL_DROP_MIN + 1e-9  # a drop of exactly the limit counts
        if falls and _train_level(train, step) >= _train_level(train, best_step):
            diverged.append((step, value, best_step, best))
    if not diverged:
        return Alarm(
            key,
            title,
            OK,
            f"{val_key} never fell {VAL_DROP_MIN:g} below its best while the training reward held",
            figure="reward",
        )
    step, value, best_step, best = diverged[-1]
    return Alarm(
        key,
        title,
        FIRED,
        f"{val_key} fell to {_fmt(value)} at step {step} from its best {_fmt(best)} at step "
        f"{best_step}, while {SCORE} held or rose",
        "the policy is learning something the validation set does not reward: overfitting "
        "the training prompts or hacking the reward (see that alarm; read the rollouts). Pick "
        "the checkpoint at the best validation step; lower the learning rate, add data",
        tuple(step for step, _, _, _ in diverged),
        "reward",
    )


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
            examples.setdefault(name, f"step {rollout.step}: {_trim(rollout.response)}")
    return hit


def _trim(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


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
)


def run_checks(records: RunRecords) -> list[Alarm]:
    return [check(records) for check in CHECKS]

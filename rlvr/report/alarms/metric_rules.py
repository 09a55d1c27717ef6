"""Alarm rules on the step metrics verl logs (metrics.jsonl): entropy, length, PPO clipping,
grad norm and validation against training reward.

Thresholds are named constants; each comment says why that value. The healthy ranges come from
docs/TRAINING.md ("Reading the metrics") and the README of github.com/luohao-brian/verl-study
it cites; docs/REPORT.md explains each alarm and what to try. Metric names are verl 0.6.1's
(``trainer/ppo/metric_utils.py``, ``workers/actor/dp_actor.py``, ``trainer/ppo/ray_trainer.py``),
as recorded in metrics.jsonl.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from rlvr.report.alarms.verdict import FIRED, NO_DATA, OK, Alarm
from rlvr.report.records import RunRecords

SCORE = "critic/score/mean"
ENTROPY = "actor/entropy"
LENGTH = "response_length/mean"
LENGTH_CLIP = "response_length/clip_ratio"
PG_CLIPFRAC = "actor/pg_clipfrac"
GRAD_NORM = "actor/grad_norm"

# --- thresholds ---------------------------------------------------------------------------------

#: Steps whose median is a run's starting response length: one step is noisy, and by step 3
#: a collapse or runaway has usually not started yet.
BASELINE_STEPS = 3
#: docs/TRAINING.md and verl-study's README: entropy "below ~0.01 is collapse" (mode collapse: the
#: policy samples one answer, so every group has zero spread).
ENTROPY_FLOOR = 0.01
#: Healthy entropy is stable or slowly drifting (verl-study: 0.2 -> 0.3); a fall to under a fifth
#: of the first step's (the untrained policy on its own samples, averaged over every token of
#: the batch, so not noisy) is the policy turning deterministic, whatever the model's scale.
ENTROPY_FALL_FRACTION = 0.2
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
#: verl-study's healthy grad norm band (0.05-0.2) spans 4x; 5x the recent median is outside it.
GRAD_SPIKE_FACTOR = 5.0
#: Recent median over this many earlier steps, once at least GRAD_MIN_HISTORY are known.
GRAD_WINDOW = 10
GRAD_MIN_HISTORY = 3
#: Validation falling 5 points below its best is beyond step-to-step noise of greedy validation on
#: a few hundred prompts (binomial standard error at most 0.035 at 200 prompts).
VAL_DROP_MIN = 0.05
#: Training reward level at a validation: the mean of this many training steps up to it.
TRAIN_WINDOW = 5


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

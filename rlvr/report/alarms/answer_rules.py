"""Alarm rules on what the reward said about each dumped response (rollouts/<step>.jsonl): its
``correct``/``acc`` and ``format`` extras (rewards/countdown.py, rewards/gsm8k.py) and the
``truncated`` flag the recipes' trainer adds (rlvr/train/trainer.py): right answers lost to the
length cap or the parser, and GRPO groups whose spread comes from partial credit alone.

Thresholds are named constants; each comment says why that value (docs/REPORT.md explains each
alarm and what to try).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from rlvr.report.alarms.verdict import FIRED, NO_DATA, OK, Alarm, trim
from rlvr.report.records import (
    MIN_JUDGED_GROUPS,
    TRUNCATED_KEY,
    Rollout,
    RunRecords,
    groups_by_prompt,
    pooled_shares,
)

# --- thresholds ---------------------------------------------------------------------------------

#: Cut responses judged at a step before the share means anything: one or two cut responses of
#: a small batch are anecdotes.
CUT_MIN = 4
#: A fifth of the cut responses right, or as likely right as their prompt's finished answers:
#: the cap is cutting answers, not only rambling (which the length alarm already reports).
CUT_CORRECT_SHARE = 0.2
#: Right-looking answers the parser missed, at least this many at a step...
HIDDEN_MIN = 2
#: ...and one in ten of the step's right answers (graded ones plus hidden ones): a tenth of the
#: reward signal lost to the answer format, not to the model's arithmetic.
HIDDEN_SHARE = 0.1
#: Over a quarter of the groups handing out advantages with no right answer among them: a
#: quarter of the batch's gradient teaches partial credit (format, closeness), not the task.
PHANTOM_MAX = 0.25

#: A number the response ends on (before closing punctuation or markup: "17.", "**17**",
#: "\\boxed{17}"): a last line like "... = 33" or "The answer is 17." reads as an answer; a
#: number restated mid-sentence ("The target is 33, so...") does not.
NUMBER_AT_END = re.compile(r"(-?\d[\d,]*(?:\.\d+)?(?:/\d+)?)[\s.!*)\]}$]*$")


@dataclass(frozen=True)
class CutCount:
    """A step's cut responses: how many, how many the reward found right, and how many more would
    have been right at the rate of their prompt's uncut responses."""

    cut: int
    cut_correct: int
    expected: float
    correct: int  # right answers of the step, cut or not
    graded: int  # responses with both flags known

    @property
    def share(self) -> float:
        return (self.cut_correct + self.expected) / self.cut if self.cut else 0.0


def count_cut(rollouts: Sequence[Rollout]) -> CutCount | None:
    """The step's cut responses, or None when its dump lacks the truncated flag or correctness."""
    known = [r for r in rollouts if r.truncated is not None and r.correct is not None]
    if not known:
        return None
    expected = 0.0
    for group in groups_by_prompt(known).values():
        finished = [r for r in group if not r.truncated]
        cut_wrong = [r for r in group if r.truncated and not r.correct]
        if finished and cut_wrong:
            expected += len(cut_wrong) * sum(bool(r.correct) for r in finished) / len(finished)
    cut = [r for r in known if r.truncated]
    return CutCount(
        len(cut),
        sum(bool(r.correct) for r in cut),
        expected,
        sum(bool(r.correct) for r in known),
        len(known),
    )


def expected_answer(truth: Any) -> Fraction | None:
    """The number a right answer ends on: the ground truth itself (GSM8K: "17") or its
    ``target`` (Countdown: {"target": 33, "numbers": [...]}); None for anything else."""
    if isinstance(truth, Mapping):
        truth = truth.get("target")
    if isinstance(truth, bool):
        return None
    return _number(str(truth)) if isinstance(truth, str | int | float) else None


def _number(text: str) -> Fraction | None:
    try:
        return Fraction(text.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def looks_right(rollout: Rollout) -> bool:
    """An answer the reward could not read (its ``format`` extra 0) that ends on the expected
    number: what a reader would have graded right."""
    if rollout.extras.get("format") not in (0, 0.0, False):
        return False
    want = expected_answer(rollout.extras.get("gts"))
    end = NUMBER_AT_END.search(rollout.response)
    return want is not None and end is not None and _number(end.group(1)) == want


def _pct(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "n/a"


def _cut_part(records: RunRecords) -> tuple[list[int], str] | None:
    """Steps where the cap cut answers that were or would have been right, and what was seen;
    None when no dump carries the truncated flag and the reward's correctness."""
    counts = {step: count_cut(rs) for step, rs in sorted(records.rollouts.items())}
    judged = {step: c for step, c in counts.items() if c is not None}
    if not judged:
        return None
    fired = [s for s, c in judged.items() if c.cut >= CUT_MIN and c.share >= CUT_CORRECT_SHARE]
    cut = sum(c.cut for c in judged.values())
    cut_correct = sum(c.cut_correct for c in judged.values())
    correct = sum(c.correct for c in judged.values())
    wrong = sum(c.graded for c in judged.values()) - correct
    worst = max((judged[s].share for s in fired), default=0.0)
    seen = (
        f"cut at max_response_length: {_pct(cut_correct, correct)} of right answers, "
        f"{_pct(cut - cut_correct, wrong)} of wrong ones ({cut} cut over {len(judged)} dumps)"
    )
    if fired:
        seen += (
            f"; up to {worst:.0%} of a step's cut responses were right, or as likely right as "
            f"their prompt's finished answers (limit {CUT_CORRECT_SHARE:.0%})"
        )
    return fired, seen


def _parse_part(records: RunRecords) -> tuple[list[int], str, list[str]] | None:
    """Steps where the parser missed right-looking answers, what was seen and examples; None
    when the reward returns no ``format`` or correctness."""
    fired: list[int] = []
    correct = hidden_total = judged = 0
    examples: list[str] = []
    for step, rollouts in sorted(records.rollouts.items()):
        known = [r for r in rollouts if r.correct is not None and "format" in r.extras]
        if not known:
            continue
        judged += 1
        right = sum(bool(r.correct) for r in known)
        hidden = [r for r in known if looks_right(r)]
        correct, hidden_total = correct + right, hidden_total + len(hidden)
        examples += [f"step {step}: {trim(r.response)}" for r in hidden[:1]]
        if len(hidden) >= HIDDEN_MIN and len(hidden) / (right + len(hidden)) >= HIDDEN_SHARE:
            fired.append(step)
    if not judged:
        return None
    seen = (
        f"unparsed (format 0) yet ending on the expected number: {hidden_total}, "
        f"{_pct(hidden_total, correct + hidden_total)} of right-looking answers"
    )
    return fired, seen, examples[:3]


def answers_cut_or_unparsed(records: RunRecords) -> Alarm:
    key, title = "answers_lost", "correct answers cut or unparsed"
    if not records.rollouts:
        return Alarm(key, title, NO_DATA, "no rollout dumps (trainer.rollout_data_dir)")
    cut, parsed = _cut_part(records), _parse_part(records)
    if cut is None and parsed is None:
        return Alarm(key, title, NO_DATA, "the dumps carry no correct/acc or format extras")
    seen = [part[1] for part in (cut, parsed) if part is not None]
    if cut is None:
        seen.append(f"truncation unknown (dumps without the {TRUNCATED_KEY!r} field)")
    steps = sorted({*(cut[0] if cut else []), *(parsed[0] if parsed else [])})
    if not steps:
        return Alarm(key, title, OK, "; ".join(seen))
    return Alarm(
        key,
        title,
        FIRED,
        "; ".join(seen),
        "cut: raise data.max_response_length (eval analyse suggests one from the lengths of "
        "right answers) or ask for shorter reasoning in the prompt; unparsed: read the "
        "examples and make the prompt's answer format explicit, or the reward's reader "
        "accept what the model writes (rewards/<task>.py, e.g. gsm8k method=flexible)",
        tuple(steps),
        examples=tuple(parsed[2]) if parsed and parsed[0] else (),
    )


def phantom_advantages(records: RunRecords) -> Alarm:
    key, title = "phantom_advantages", "phantom advantages among wrong answers"
    per_step: list[tuple[int, int, int]] = []
    scores: dict[float, int] = {}
    for step, rollouts in sorted(records.rollouts.items()):
        groups = [g for g in groups_by_prompt(rollouts).values() if len(g) > 1]
        judged = [g for g in groups if all(r.correct is not None for r in g)]
        phantom = [
            g
            for g in judged
            if not any(r.correct for r in g) and max(r.score for r in g) > min(r.score for r in g)
        ]
        for group in phantom:
            for score in {round(r.score, 6) for r in group}:
                scores[score] = scores.get(score, 0) + 1
        if judged:
            per_step.append((step, len(phantom), len(judged)))
    points = pooled_shares(per_step)
    if not points:
        return Alarm(
            key,
            title,
            NO_DATA,
            f"under {MIN_JUDGED_GROUPS} groups with the reward's correct/acc dumped",
        )
    high = [(step, share) for step, share in points if share > PHANTOM_MAX]
    worst = max(share for _, share in points)
    if not high:
        return Alarm(
            key,
            title,
            OK,
            f"at most {worst:.0%} of groups had no right answer yet unequal scores "
            f"(windows of {MIN_JUDGED_GROUPS}+ groups)",
        )
    common = ", ".join(f"{s:g}" for s, _ in sorted(scores.items(), key=lambda i: -i[1])[:4])
    return Alarm(
        key,
        title,
        FIRED,
        f"up to {worst:.0%} of groups had no right answer yet unequal scores (limit "
        f"{PHANTOM_MAX:.0%}; their scores: {common}): GRPO ranks wrong answers by partial credit",
        "the spread comes from format or closeness credit: once the model answers in the "
        "format, turn the partial credit off (custom_reward_function.reward_kwargs: "
        "format_score=0, and shaping=false for Countdown), or keep it on purpose while the "
        "format is still being learned",
        tuple(step for step, _ in high),
    )

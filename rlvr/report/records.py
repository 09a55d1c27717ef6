"""What a run report reads: the run's per-step metrics and verl's rollout dumps.

A run folder is ``trainer.default_local_dir`` (configs/grpo.yaml): ``metrics.jsonl`` from verl's
``file`` logger (read by ``rlvr.report.metrics_log``) and ``rollouts/<step>.jsonl`` from
``RayPPOTrainer._dump_generations`` (``trainer.rollout_data_dir``): one JSON object per response
with ``input`` (the prompt, decoded without special tokens), ``output``, ``gts``, ``score``,
``step``, the reward's extra keys (``acc``, ``correct``, ``format``...) and, from the recipes'
trainer, ``response_length`` and ``truncated`` (rlvr/train/trainer.py). verl 0.6.1 writes no
``data_source`` there, so the task comes from the metrics' ``val-core/<data_source>/`` keys unless
a dump names it (or the caller does).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlvr.common.messages import first_line
from rlvr.report.metrics_log import StepRecord, read_log
from rlvr.report.run_plan import RunPlan, read_run_plan, run_status
from rlvr.tasks.spec import TaskSpec

METRICS_FILE = "metrics.jsonl"
ROLLOUTS_DIR = "rollouts"
#: val-core/<data_source>/<acc|reward>/mean@N: verl's core validation number (acc when the reward
#: returns one, else the reward), the mean over N samples per prompt.
VAL_CORE_KEY = re.compile(r"^val-core/(?P<source>.+)/(?P<var>acc|reward)/mean@(?P<n>\d+)$")
VAL_SOURCE_KEY = re.compile(r"^val-(?:core|aux)/(?P<source>.+)/[^/]+/(?:mean|std|best|maj)@")
#: Per-response keys the recipes' trainer adds to each dump line (``RecipeTrainer``'s
#: ``_log_rollout_data``): the response's token count and whether it hit max_response_length.
RESPONSE_LENGTH_KEY = "response_length"
TRUNCATED_KEY = "truncated"
#: The reward extras that say a response was right: the tasks' rewards return both (rewards/).
CORRECT_KEYS = ("correct", "acc")


class ReportError(Exception):
    """Input a report cannot be made from; the message is one line saying which and why."""


class NotYetError(ReportError):
    """The run folder exists but holds no logged step yet (``--follow`` waits for one)."""


@dataclass(frozen=True)
class Rollout:
    """One sampled response of a training step, as verl dumped it."""

    step: int
    prompt: str
    response: str
    score: float
    extras: Mapping[str, Any] = field(default_factory=dict)  # gts, acc, format, data_source...

    @property
    def data_source(self) -> str | None:
        source = self.extras.get("data_source")
        return source if isinstance(source, str) else None

    @property
    def correct(self) -> bool | None:
        """Whether the reward judged the answer right (its ``correct`` or ``acc`` extra); None
        when the reward returns neither."""
        return _flag(self.extras, CORRECT_KEYS)

    @property
    def truncated(self) -> bool | None:
        """Whether the response hit max_response_length; None in dumps without the field."""
        return _flag(self.extras, (TRUNCATED_KEY,))


def _flag(extras: Mapping[str, Any], keys: Sequence[str]) -> bool | None:
    for key in keys:
        value = extras.get(key)
        if isinstance(value, bool | int | float):
            return bool(value)
    return None


@dataclass(frozen=True)
class GroupStats:
    """A step's GRPO groups (responses to one prompt); a zero-spread group gives no gradient."""

    groups: int
    zero_spread: int
    constant_scores: Mapping[float, int]  # the one score of each zero-spread group, counted

    @property
    def share(self) -> float:
        return self.zero_spread / self.groups if self.groups else 0.0


def groups_by_prompt(rollouts: Sequence[Rollout]) -> dict[str, list[Rollout]]:
    """A step's GRPO groups: its responses to each prompt (identical text)."""
    by_prompt: dict[str, list[Rollout]] = {}
    for rollout in rollouts:
        by_prompt.setdefault(rollout.prompt, []).append(rollout)
    return by_prompt


def scores_by_prompt(rollouts: Sequence[Rollout]) -> dict[str, list[float]]:
    """A step's GRPO groups: the scores of its responses to each prompt."""
    return {p: [r.score for r in group] for p, group in groups_by_prompt(rollouts).items()}


def group_stats(rollouts: Sequence[Rollout]) -> GroupStats:
    """Responses grouped by identical prompt; groups of one response are left out (no spread
    can be measured; verl's GRPO gives a lone response its score as advantage, baseline 0)."""
    groups = [scores for scores in scores_by_prompt(rollouts).values() if len(scores) > 1]
    constant = Counter(
        round(scores[0], 6) for scores in groups if max(scores) - min(scores) <= 1e-9
    )
    return GroupStats(len(groups), sum(constant.values()), dict(constant))


@dataclass(frozen=True)
class RunRecords:
    """Everything one report is computed from; alarms are pure functions of it."""

    run_dir: Path
    steps: tuple[StepRecord, ...]
    rollouts: Mapping[int, tuple[Rollout, ...]]  # step -> its dumped responses
    task: TaskSpec | None = None
    notes: tuple[str, ...] = ()  # what was skipped while reading, for the report
    #: how far the run got against its plan (``rlvr.report.run_plan.run_status``); "" when the
    #: records were not read from a run folder
    status: str = ""
    plan: RunPlan | None = None  # run_plan.json, when the run folder has a readable one

    def series(self, key: str) -> list[tuple[int, float]]:
        """``key`` at every step that logged it, non-finite values included (an alarm may care)."""
        return [(r.step, r.metrics[key]) for r in self.steps if key in r.metrics]

    def finite(self, key: str) -> list[tuple[int, float]]:
        return [(step, value) for step, value in self.series(key) if math.isfinite(value)]

    @property
    def last_step(self) -> int:
        return self.steps[-1].step if self.steps else 0

    def val_key(self) -> str | None:
        """The core validation metric (the first data source's, acc before reward)."""
        keys = {key for record in self.steps for key in record.metrics if VAL_CORE_KEY.match(key)}
        ranked = sorted(keys, key=lambda key: ("/reward/" in key, key))
        return ranked[0] if ranked else None

    def val_sources(self) -> list[str]:
        found = {
            match["source"]
            for record in self.steps
            for key in record.metrics
            if (match := VAL_SOURCE_KEY.match(key))
        }
        return sorted(found)


def zero_spread_series(records: RunRecords) -> list[tuple[int, float, str]]:
    """(step, share of zero-spread groups, where from) per step. From the rollout dump where the
    step has one; else, from the metrics, 1.0 at a step whose batch scores were all equal
    (``critic/score/min == max``); other steps without a dump are unknown and left out."""
    points: dict[int, tuple[float, str]] = {}
    for record in records.steps:
        low = record.metrics.get("critic/score/min")
        high = record.metrics.get("critic/score/max")
        if low is not None and high is not None and abs(high - low) <= 1e-9:
            points[record.step] = (1.0, "metrics")
    for step, rollouts in records.rollouts.items():
        stats = group_stats(rollouts)
        if stats.groups:
            points[step] = (stats.share, "rollouts")
    return [(step, share, source) for step, (share, source) in sorted(points.items())]


#: Fewest GRPO groups a zero-spread share is judged on. One step of a 4-prompt CPU batch moves in
#: quarters (binomial s.e. 0.25 at a true share of one half), so "most groups" fired on chance
#: steps; pooled over consecutive steps up to 32 groups the s.e. is under 0.09. A GPU step (64
#: prompts) is judged alone, as before.
MIN_JUDGED_GROUPS = 32


def judged_zero_spread(records: RunRecords) -> list[tuple[int, float, str]]:
    """``zero_spread_series`` as the alarm judges it: a dumped step's share is pooled with the
    steps just before it until the window holds ``MIN_JUDGED_GROUPS`` groups (steps whose window
    never does are left out); steps known from the metrics only are kept as they are."""
    per_step = []
    for step, rollouts in sorted(records.rollouts.items()):
        stats = group_stats(rollouts)
        per_step.append((step, stats.zero_spread, stats.groups))
    pooled = {step: (share, "rollouts") for step, share in pooled_shares(per_step)}
    metrics_only = [p for p in zero_spread_series(records) if p[0] not in records.rollouts]
    points = {step: (share, source) for step, share, source in metrics_only} | pooled
    return [(step, share, source) for step, (share, source) in sorted(points.items())]


def pooled_shares(
    per_step: Sequence[tuple[int, int, int]], min_total: int = MIN_JUDGED_GROUPS
) -> list[tuple[int, float]]:
    """(step, hits / total) from (step, hits, total) in step order, each step pooled with the
    steps just before it until the window's total reaches ``min_total`` (steps whose window never
    does are left out): a share of groups judged on enough groups, whatever the batch size."""
    pooled: list[tuple[int, float]] = []
    for end, (step, _, _) in enumerate(per_step):
        hits = total = 0
        for _, step_hits, step_total in reversed(per_step[: end + 1]):
            hits, total = hits + step_hits, total + step_total
            if total >= min_total:
                pooled.append((step, hits / total))
                break
    return pooled


# --- reading ------------------------------------------------------------------------------------

#: Parsed dump files by path, reused while (mtime, size) is unchanged (``--follow`` re-reads).
RolloutCache = dict[Path, tuple[tuple[int, int], tuple[tuple["Rollout", ...], int]]]


def load_run(
    run_dir: Path,
    task: TaskSpec | None = None,
    cache: RolloutCache | None = None,
) -> RunRecords:
    """The run's records. Raises ReportError (NotYetError while nothing is logged yet)."""
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: no such run folder")
    metrics = run_dir / METRICS_FILE
    if not metrics.is_file():
        raise NotYetError(f"{run_dir}: no {METRICS_FILE}{_nested_hint(run_dir)}")
    try:
        log = read_log(metrics)
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise ReportError(first_line(exc)) from None
    if not log.steps:
        why = log.notes[0] if log.notes else "empty file"
        raise NotYetError(f"{metrics}: no step logged ({why})")
    plan, plan_note = read_run_plan(run_dir)
    training_steps = [r.step for r in log.steps if r.step > 0]
    status, status_notes = run_status(run_dir, training_steps, plan, plan_note)
    rollouts, rollout_notes = read_rollouts(run_dir / ROLLOUTS_DIR, cache)
    notes = (*log.notes, *status_notes, *rollout_notes)
    records = RunRecords(run_dir, tuple(log.steps), rollouts, None, notes, status, plan)
    return replace(records, task=task or infer_task(records))


def read_rollouts(
    folder: Path, cache: RolloutCache | None = None
) -> tuple[dict[int, tuple[Rollout, ...]], list[str]]:
    """``<step>.jsonl`` dumps under ``folder`` (none when it does not exist), and notes on the
    lines that could not be read (a file still being written, a foreign line)."""
    rollouts: dict[int, tuple[Rollout, ...]] = {}
    notes: list[str] = []
    if not folder.is_dir():
        return rollouts, notes
    for path in sorted(folder.glob("*.jsonl")):
        if not path.stem.isdigit():
            continue
        try:
            stat = path.stat()
            key = (stat.st_mtime_ns, stat.st_size)
            cached = cache.get(path) if cache is not None else None
            if cached is not None and cached[0] == key:
                parsed, skipped = cached[1]
            else:
                parsed, skipped = parse_rollouts(path.read_text(encoding="utf-8"), int(path.stem))
                if cache is not None:
                    cache[path] = (key, (parsed, skipped))
        except (OSError, UnicodeDecodeError) as exc:  # pruned by the trainer while we read
            notes.append(f"{path.name}: not read ({type(exc).__name__})")
            continue
        if skipped:
            notes.append(f"{ROLLOUTS_DIR}/{path.name}: {skipped} unreadable line(s) skipped")
        if parsed:
            rollouts[int(path.stem)] = parsed
    return rollouts, notes


def parse_rollouts(text: str, step: int) -> tuple[tuple[Rollout, ...], int]:
    """The responses in one dump's text, and how many non-blank lines were not responses."""
    parsed: list[Rollout] = []
    skipped = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        rollout = _rollout(line, step)
        if rollout is None:
            skipped += 1
        else:
            parsed.append(rollout)
    return tuple(parsed), skipped


def _rollout(line: str, step: int) -> Rollout | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    prompt, response, score = entry.get("input"), entry.get("output"), entry.get("score")
    if not isinstance(prompt, str) or not isinstance(response, str):
        return None
    if isinstance(score, bool) or not isinstance(score, int | float):
        return None
    extras = {k: v for k, v in entry.items() if k not in ("input", "output", "score", "step")}
    return Rollout(step, prompt, response, float(score), extras)


def infer_task(records: RunRecords) -> TaskSpec | None:
    """The registered task the run trained, when exactly one is named by the dumps'
    ``data_source`` or the metrics' validation keys."""
    from rlvr import tasks

    by_source = {spec.data_source: spec for spec in tasks.all_specs()}
    sources = {r.data_source for rs in records.rollouts.values() for r in rs} - {None}
    if not sources:
        sources = set(records.val_sources())
    known = {by_source[source].name: by_source[source] for source in sources if source in by_source}
    return next(iter(known.values())) if len(known) == 1 else None


def _nested_hint(run_dir: Path) -> str:
    nested = sorted(run_dir.glob(f"*/{METRICS_FILE}"))[:3]
    if not nested:
        return " (is it the run's trainer.default_local_dir?)"
    names = ", ".join(str(path.parent) for path in nested)
    return f"; runs inside it: {names}"

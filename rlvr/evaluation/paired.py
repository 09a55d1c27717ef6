"""Paired before/after deltas of two eval runs, with a 95% confidence interval over prompts, and
when two runs compare at all.

For each prompt, the mean of a per-sample value (score, success, format) over its samples after
training minus the same mean before. The delta is the mean of those per-prompt differences, and
its interval is the paired Student t interval over prompts,
``mean(d) +- t(0.975, P - 1) * sd(d) / sqrt(P)``, which is honest about how few prompts a CPU
run can afford: a gain on 32 prompts must be large to exclude zero.

Two runs compare only when everything but the model was the same; refused, in one line naming
the difference, when they differ in the prompts (the (index, ground truth) pairs of their
samples, the data's ``prompts_sha256``), their rendering (``rendered_sha256``, template kwargs),
generation (n, temperature, top_p, max_tokens, ignore_eos, and the seed where sampling) or
grading (the reward kwargs). A run written before the hashes were recorded is refused with the
field it lacks; a setting an old run lacks where it cannot matter (a greedy run's seed) is a
warning.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlvr.evaluation import EvalError
from rlvr.evaluation.metrics import is_success
from rlvr.evaluation.records import (
    FINGERPRINT_KEYS,
    GradedSample,
    RunHeader,
    Summary,
    load_summary,
    read_records,
)

PromptKey = tuple[int, str]  # (prompt_index, the ground truth as canonical JSON)

#: Per-sample values a delta can be taken of: name -> (label, value of one graded sample).
PARTS: dict[str, tuple[str, Callable[[GradedSample], float]]] = {
    "score": ("mean score", lambda s: s.score),
    "success": ("pass@1 (success rate)", lambda s: float(is_success(s.score))),
    "format": ("format rate", lambda s: s.format),
}
#: Settings that must match for two runs to be paired (reward kwargs are checked too).
SAMPLING_KEYS = ("n", "temperature", "top_p", "max_tokens")


@dataclass(frozen=True)
class Interval:
    """The mean of paired differences and its two-sided confidence interval."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0.0 or self.high < 0.0


def paired_t_interval(differences: Sequence[float], confidence: float = 0.95) -> Interval:
    """``mean(d) +- t((1 + confidence) / 2, n - 1) * sd(d) / sqrt(n)``, sd with n - 1.

    Needs two or more differences; all-equal differences give a zero-width interval.
    """
    # Imported here: scipy.stats takes about 0.7 s to import, and every eval run imports this
    # module (through statistics.py) though only comparisons compute an interval.
    from scipy.stats import t as student_t

    n = len(differences)
    if n < 2:
        raise EvalError(f"a paired interval needs at least 2 prompts, got {n}")
    average = sum(differences) / n
    sd = math.sqrt(sum((d - average) ** 2 for d in differences) / (n - 1))
    half = float(student_t.ppf((1.0 + confidence) / 2.0, n - 1)) * sd / math.sqrt(n)
    return Interval(average, average - half, average + half, n)


# ---------------------------------------------------------------- runs


@dataclass(frozen=True)
class EvalRunSamples:
    """An eval run folder's summary and its graded samples, grouped by prompt."""

    path: Path
    summary: Summary
    prompts: dict[PromptKey, list[GradedSample]]

    @classmethod
    def load(cls, path: str | Path, summary: Summary | None = None) -> EvalRunSamples:
        """The run in folder ``path``; ``summary``, when given, stands for its summary.json."""
        folder = Path(path)
        summary = summary or load_summary(folder)
        samples_file = folder / "samples.jsonl"
        if not samples_file.is_file():
            raise EvalError(f"{folder}: no samples.jsonl (is it an eval run folder?)")
        prompts: dict[PromptKey, list[GradedSample]] = {}
        for sample in read_records(samples_file, GradedSample):
            prompts.setdefault(prompt_key(sample), []).append(sample)
        if not prompts:
            raise EvalError(f"{samples_file}: no samples")
        return cls(folder, summary, prompts)

    def restricted_to(self, keys: Iterable[PromptKey]) -> EvalRunSamples:
        """The same run, on the prompts of ``keys`` alone (those it holds)."""
        wanted = set(keys)
        kept = {key: group for key, group in self.prompts.items() if key in wanted}
        return EvalRunSamples(self.path, self.summary, kept)

    def prompt_means(self, part: str) -> dict[PromptKey, float]:
        """Per prompt, the mean of ``part`` (a key of ``PARTS``) over its samples."""
        value = PARTS[part][1]
        return {key: sum(map(value, group)) / len(group) for key, group in self.prompts.items()}


def prompt_key(sample: GradedSample) -> PromptKey:
    return sample.prompt_index, json.dumps(sample.ground_truth, sort_keys=True)


def check_pairable(before: EvalRunSamples, after: EvalRunSamples) -> None:
    """Refuse two runs whose difference would not be the model's alone."""
    if before.prompts.keys() != after.prompts.keys():
        only_before = len(before.prompts.keys() - after.prompts.keys())
        only_after = len(after.prompts.keys() - before.prompts.keys())
        raise EvalError(
            f"{before.path} and {after.path} are on different data: {only_before} prompt(s) "
            f"(index, ground truth) only in the first, {only_after} only in the second"
        )
    head_b, head_a = before.summary.header, after.summary.header
    for key in SAMPLING_KEYS:
        if head_b.sampling.get(key) != head_a.sampling.get(key):
            raise EvalError(
                f"{before.path} and {after.path} sample differently: {key} "
                f"{head_b.sampling.get(key)!r} vs {head_a.sampling.get(key)!r}"
            )
    if head_b.reward_kwargs != head_a.reward_kwargs:
        raise EvalError(
            f"{before.path} and {after.path} are graded differently: reward kwargs "
            f"{head_b.reward_kwargs} vs {head_a.reward_kwargs}"
        )


@dataclass(frozen=True)
class PairedDelta:
    """One metric before and after, and its paired delta with a 95% interval over prompts."""

    part: str
    label: str
    before: float
    after: float
    interval: Interval

    def to_json(self) -> dict[str, object]:
        return {
            "metric": self.part,
            "before": self.before,
            "after": self.after,
            "delta": self.interval.mean,
            "ci95": [self.interval.low, self.interval.high],
            "prompts": self.interval.n,
        }


def paired_deltas(
    before_dir: str | Path,
    after_dir: str | Path,
    parts: Sequence[str] = tuple(PARTS),
    before_is_subset: bool = False,
) -> list[PairedDelta]:
    """Each part's mean before and after (a mean over prompts of per-prompt means) and the
    paired delta's 95% t interval over prompts. Raises ``EvalError`` on unpairable runs.

    ``before_is_subset``: the ``before`` run may hold only some of ``after``'s prompts (the same
    data with a smaller ``--limit``); the delta is then taken over those prompts alone. A
    ``before`` prompt that ``after`` lacks is still refused."""
    before, after = EvalRunSamples.load(before_dir), EvalRunSamples.load(after_dir)
    if before_is_subset and before.prompts.keys() <= after.prompts.keys():
        after = after.restricted_to(before.prompts)
    check_pairable(before, after)
    return deltas_between(before, after, parts)


def deltas_between(
    before: EvalRunSamples, after: EvalRunSamples, parts: Sequence[str] = tuple(PARTS)
) -> list[PairedDelta]:
    """``paired_deltas`` of two loaded runs, already checked to pair (``check_pairable``)."""
    deltas = []
    for part in parts:
        if part not in PARTS:
            raise EvalError(f"unknown part {part!r}: one of {', '.join(PARTS)}")
        means_b, means_a = before.prompt_means(part), after.prompt_means(part)
        keys = sorted(means_b)
        differences = [means_a[key] - means_b[key] for key in keys]
        deltas.append(
            PairedDelta(
                part=part,
                label=PARTS[part][0],
                before=sum(means_b.values()) / len(keys),
                after=sum(means_a.values()) / len(keys),
                interval=paired_t_interval(differences),
            )
        )
    return deltas


def deltas_markdown(deltas: Sequence[PairedDelta], title: str) -> list[str]:
    """Rows of a Markdown table: metric, before, after, delta and its 95% interval."""
    return [
        f"| {title} {d.label} | {d.before:.2%} | {d.after:.2%} | "
        f"{d.interval.mean * 100:+.2f} pt | {interval_cell(d.interval)} |"
        for d in deltas
    ]


#: Generation settings that must be recorded, and equal, in both runs (beyond ``SAMPLING_KEYS``).
GENERATION_KEYS = (*SAMPLING_KEYS, "ignore_eos", "seed")


def check_comparable(base: EvalRunSamples, trained: EvalRunSamples) -> list[str]:
    """Raise ``EvalError`` naming the first difference that would make the delta not the
    model's; return the warnings about what cannot matter."""
    runs = (("BASE", base), ("TRAINED", trained))
    heads = base.summary.header, trained.summary.header
    greedy = all(head.sampling.get("temperature") == 0 for head in heads)
    warnings = []
    for key in GENERATION_KEYS:
        for name, run in runs:
            if key not in run.summary.header.sampling:
                if key == "seed" and greedy:
                    warnings.append(f"warning: {name} records no seed (greedy: it cannot matter)")
                    continue
                raise _missing(name, run, f"sampling.{key}")
    for name, run in runs:
        for key in FINGERPRINT_KEYS:
            if getattr(run.summary.header, key) is None:
                raise _missing(name, run, key)
    check_pairable(base, trained)  # prompts by (index, ground truth), sampling, reward kwargs
    _check_same(heads, "prompts_sha256", "different prompts (the data's prompt content)")
    if heads[0].template_kwargs != heads[1].template_kwargs:  # before the hash: names more
        kwargs = [head.template_kwargs for head in heads]
        raise EvalError(_differ(f"chat template kwargs {kwargs[0]} vs {kwargs[1]}"))
    _check_same(heads, "rendered_sha256", "prompts rendered differently (chat template/tokenizer)")
    for key in GENERATION_KEYS[len(SAMPLING_KEYS) :]:  # check_pairable checked the rest
        if key == "seed" and greedy:
            continue
        values = [head.sampling.get(key) for head in heads]
        if values[0] != values[1]:
            raise EvalError(_differ(f"{key} {values[0]!r} vs {values[1]!r}"))
    if heads[0].backend != heads[1].backend:
        warnings.append(
            f"warning: backends differ ({heads[0].backend} vs {heads[1].backend}): the same "
            "settings decode with different numerics"
        )
    return warnings


def _missing(name: str, run: EvalRunSamples, field: str) -> EvalError:
    return EvalError(
        f"{name} {run.path} records no {field} (written by an earlier version), so it "
        "cannot be checked to match the other run; re-run its eval to compare"
    )


def _differ(what: str) -> str:
    return f"BASE and TRAINED differ in {what}: the delta would not be the model's alone"


def _check_same(heads: tuple[RunHeader, RunHeader], key: str, what: str) -> None:
    values = [getattr(head, key) for head in heads]
    if values[0] != values[1]:
        raise EvalError(
            f"BASE and TRAINED differ in {what}: {key} {str(values[0])[:12]} vs "
            f"{str(values[1])[:12]}; compare runs of the same prompts"
        )


#: The summary metrics that are per-prompt means of a per-sample value: ``PARTS``.
PAIRED_METRICS = {"mean_score": "score", "pass@1": "success", "format_rate": "format"}


def interval_cell(ci: Interval, mark: bool = True) -> str:
    """``[low, high] pt`` in percentage points, `` *`` when it excludes zero (and ``mark``)."""
    star = " *" if mark and ci.excludes_zero else ""
    return f"[{ci.low * 100:+.2f}, {ci.high * 100:+.2f}] pt{star}"

"""The statistics stage: what a run's graded samples say (``run_statistics``: pass@k and maj@k,
or the signal probe's verdict and suggested settings), and the Markdown of what two runs say
together (``compare``), of an analyse run's learnable prompts (``stats``) and of report.md's
held-out change. The numbers are ``metrics.py``'s and ``paired.py``'s; the verdict is here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlvr.evaluation import EvalError
from rlvr.evaluation.metrics import (
    ACCURACY_RANGE,
    ACCURACY_SFT_BELOW,
    ACCURACY_TOO_EASY_ABOVE,
    ENTROPY_RANGE,
    PARTIAL_CREDIT_SPREAD_MIN,
    VARIANCE_MIN,
    analyse_summary,
    is_success,
    maj_at_k,
    mean,
    pass_at_k,
    passk_summary,
    prompt_stats,
    suggested_settings,
)
from rlvr.evaluation.paired import (
    PAIRED_METRICS,
    PARTS,
    EvalRunSamples,
    Interval,
    PairedDelta,
    check_comparable,
    deltas_between,
    interval_cell,
)
from rlvr.evaluation.records import (
    AnalyseRecord,
    GradedSample,
    PassKRecord,
    SuggestedSetting,
    Summary,
    Verdict,
    load_summary,
)
from rlvr.evaluation.run_folder import (
    check_complete_run,
    format_delta,
    format_value,
    metric_value,
    new_file,
    refuse_existing,
    report_keys,
)
from rlvr.evaluation.settings import RunSettings, SamplingSettings


def compare_markdown(
    base: Summary,
    trained: Summary,
    deltas: Sequence[PairedDelta] = (),
    names: tuple[str, str] = ("base", "trained"),
) -> str:
    """A side-by-side "Base -> Trained" Markdown table of two summaries, with deltas and, for
    the metrics in ``deltas`` (paired over prompts), their 95% intervals. Whether
    the two runs compare at all is ``check_comparable``'s to say, before."""
    keys = [row for row in report_keys(base) if trained.metrics.get(row[0]) is not None]
    if not keys:
        raise EvalError("the two summaries share no metrics")
    by_part = {d.part: d for d in deltas}
    lines = [
        f"| metric | {names[0]} | {names[1]} | delta | 95% CI (paired over prompts) |",
        "|---|---|---|---|---|",
    ]
    for key, label, kind in keys:
        b, t = metric_value(base, key), metric_value(trained, key)
        paired = by_part.get(PAIRED_METRICS.get(key, ""))
        ci = "-" if paired is None else interval_cell(paired.interval)
        lines.append(
            f"| {label} | {format_value(b, kind)} | {format_value(t, kind)} | "
            f"{format_delta(t - b, kind)} | {ci} |"
        )
    notes = [
        f"{name}: {run.header.model} ({run.header.command}, {run.header.prompts} prompts)"
        for name, run in zip(names, (base, trained), strict=True)
    ]
    if deltas:
        notes.append(f"both: {_generation(base)} on the same prompts, so paired over prompts")
        notes += ["", *[_interval_line(d) for d in deltas]]
        notes += ["* = the 95% interval excludes zero; - = no per-prompt pairing for this metric"]
    return "\n".join([*lines, "", *notes]) + "\n"


def _generation(run: Summary) -> str:
    sampling = run.header.sampling
    if sampling.get("temperature") == 0:
        return f"greedy, max_tokens={sampling.get('max_tokens')}"
    keys = ("n", "temperature", "top_p", "max_tokens", "seed")
    return "sampled, " + ", ".join(f"{key}={sampling.get(key)}" for key in keys)


def _interval_line(delta: PairedDelta) -> str:
    """Whether the delta is one these prompts can tell from noise, in words."""
    ci = delta.interval
    said = (
        f"the interval excludes zero: a {'gain' if ci.mean > 0 else 'loss'} on these prompts"
        if ci.excludes_zero
        else "the interval includes zero: no change these prompts can tell from noise"
    )
    return f"- {delta.label}: {_points(ci)} over {ci.n} prompts; {said}"


def _points(ci: Interval) -> str:
    """A paired delta and its interval, in percentage points."""
    return f"{ci.mean * 100:+.2f} pt, 95% CI {interval_cell(ci, mark=False)}"


def stats_markdown(
    records: Sequence[AnalyseRecord],
    chosen: Sequence[AnalyseRecord],
    var_min: float,
    entropy_min: float,
    top: int,
) -> str:
    """The learnable prompts of an analyse run, most informative first, as a table."""
    share = len(chosen) / len(records) if records else 0.0
    lines = [
        f"{len(chosen)} of {len(records)} prompts ({share:.1%}) have variance > {var_min} and "
        f"outcome entropy >= {entropy_min}.",
        "",
        "| prompt | success rate | mean score | variance | outcome entropy | token entropy |",
        "|---|---|---|---|---|---|",
    ]
    for r in chosen[:top]:
        token = "-" if r.token_entropy is None else f"{r.token_entropy:.3f}"
        lines.append(
            f"| {r.prompt_index} | {r.success_rate:.2%} | {r.mean_score:.3f} | "
            f"{r.variance:.4f} | {r.outcome_entropy:.3f} | {token} |"
        )
    if len(chosen) > top:
        lines.append(f"| ... {len(chosen) - top} more | | | | | |")
    return "\n".join(lines) + "\n"


NOISE_NOTE = (
    "The training-score curve below (the mean reward of each step's few training prompts) is "
    "noise at this size: it can fall while the model improves. The held-out eval above is the "
    "measurement."
)


def _row(name: str, delta: PairedDelta) -> str:
    ci = delta.interval
    zero = "excludes zero" if ci.excludes_zero else "includes zero"
    return f"- {name}: {delta.before:.2%} -> {delta.after:.2%}, {_points(ci)} ({zero})"


def interval_verdict(name: str, interval: Interval, after: str) -> str:
    """One sentence: does the paired interval exclude zero, and which way."""
    if interval.excludes_zero:
        return (
            f"The 95% interval of {name} excludes zero: on these held-out prompts the {after} "
            f"model is right {'more' if interval.low > 0.0 else 'less'} often, beyond the noise "
            "of this many prompts."
        )
    return (
        f"The 95% interval of {name} includes zero: this run shows no held-out change in "
        f"{name} that {interval.n} prompts can tell from noise."
    )


def held_out_section(
    sampled: PairedDelta, greedy: PairedDelta | None, before: str, after: str, sampling: str
) -> list[str]:
    """The section's Markdown lines: sampled pass@1 (the headline), greedy pass@1 when given,
    the verdict on the sampled interval and the note on the training curve."""
    rows = [_row(f"sampled pass@1 ({sampling} per prompt)", sampled)]
    if greedy is not None:
        rows.append(_row("greedy pass@1", greedy))
    return [
        f"## Held-out change: {before} -> {after}",
        "",
        f"The same {sampled.interval.n} held-out prompts before and after; each difference "
        "is paired over prompts (Student t 95% interval, rlvr/evaluation/paired.py).",
        "",
        *rows,
        "",
        interval_verdict("sampled pass@1", sampled.interval, after),
        NOISE_NOTE,
        "",
    ]


@dataclass(frozen=True)
class RunStatistics:
    """What the statistics stage makes of one run's graded samples."""

    records: list[PassKRecord] | list[AnalyseRecord]  # prompts.jsonl; none for reward
    metrics: dict[str, float | None]
    verdict: Verdict | None = None  # analyse
    settings: list[SuggestedSetting] | None = None  # analyse: suggested training settings


def run_statistics(
    command: str,
    graded: Sequence[Sequence[GradedSample]],
    sampling: SamplingSettings,
    ks: Sequence[int] = (),
    voting: bool = False,
    training: RunSettings | None = None,
) -> RunStatistics:
    """The sample-level means of every command, and passk's or analyse's own statistics."""
    samples = [s for group in graded for s in group]
    means: dict[str, float | None] = {
        **{key: mean([PARTS[part][1](s) for s in samples]) for key, part in PAIRED_METRICS.items()},
        "mean_response_tokens": mean([s.response_tokens for s in samples]),
        "truncated_rate": mean([float(s.finish_reason == "length") for s in samples]),
    }
    if command == "passk":
        return _passk(graded, sampling.n, ks, voting, means)
    if command == "analyse":
        return _analyse(graded, sampling.max_tokens, training, means)
    return RunStatistics([], means)


def _passk(
    graded: Sequence[Sequence[GradedSample]],
    n: int,
    ks: Sequence[int],
    voting: bool,
    means: dict[str, float | None],
) -> RunStatistics:
    """pass@k for each k and, when the reward file names each response's answer
    (``answer_key``), maj@k."""
    # verl's validation reports mean@N/best@N/maj@N too (verl/trainer/ppo/metric_utils.py,
    # process_validation_metrics), but inside the trainer only: this runs on a saved checkpoint
    # outside it, keeps per-prompt records, and feeds paired confidence intervals.
    successes = [sum(is_success(s.score) for s in group) for group in graded]
    votes = [[(s.answer_key, is_success(s.score)) for s in group] for group in graded]
    maj_at = [{k: maj_at_k(v, k) for k in ks} if voting else {} for v in votes]
    records = [
        PassKRecord(
            prompt_index=group[0].prompt_index,
            ground_truth=group[0].ground_truth,
            n=n,
            successes=c,
            pass_at={k: pass_at_k(n, c, k) for k in ks},
            maj_at=majority,
        )
        for group, c, majority in zip(graded, successes, maj_at, strict=True)
    ]
    majk = {f"maj@{k}": mean([m[k] for m in maj_at]) for k in ks} if voting else {}
    return RunStatistics(records, {**means, **passk_summary(successes, n, ks), **majk})


def _analyse(
    graded: Sequence[Sequence[GradedSample]],
    probe_cap: int,
    training: RunSettings | None,
    means: dict[str, float | None],
) -> RunStatistics:
    """Is there a GRPO signal here: per-prompt statistics, the verdict, suggested settings."""
    records = [
        AnalyseRecord.of(
            prompt_stats(
                group[0].prompt_index, [s.score for s in group], [s.logprobs for s in group]
            ),
            group[0].ground_truth,
        )
        for group in graded
    ]
    overall = analyse_summary(records)
    accuracy, variance_, entropy = (
        overall[key] or 0.0 for key in ("accuracy", "mean_variance", "mean_outcome_entropy")
    )
    judged = verdict(accuracy, variance_, entropy, overall["nonzero_variance_fraction"] or 0.0)
    settings = suggested_settings(graded, records, probe_cap, training)
    return RunStatistics(records, {**means, **overall}, judged, settings)


def verdict(
    accuracy: float,
    mean_variance: float,
    mean_outcome_entropy: float,
    spread_fraction: float = 0.0,
) -> Verdict:
    """verl-study's guidance applied: accuracy 10-80%, variance > 0.05, entropy 0.2-0.8.

    ``spread_fraction`` is the share of groups whose *scores* differ. GRPO divides each group's
    advantages by its own spread, so partial credit (format, shaping) that splits a group is a
    full-sized signal even when no sample is correct: that case is ``partial_credit``, not
    ``sft_first``, and its advice says what such a run can and cannot learn.
    """
    checks = {
        "accuracy in 10-80%": ACCURACY_RANGE[0] <= accuracy <= ACCURACY_RANGE[1],
        "variance > 0.05": mean_variance > VARIANCE_MIN,
        "entropy in 0.2-0.8": ENTROPY_RANGE[0] <= mean_outcome_entropy <= ENTROPY_RANGE[1],
    }
    if accuracy < ACCURACY_SFT_BELOW and spread_fraction >= PARTIAL_CREDIT_SPREAD_MIN:
        return Verdict(
            "partial_credit",
            f"accuracy {accuracy:.1%} < 5%, but {spread_fraction:.0%} of the groups disagree in "
            "score through partial credit (format, shaping): GRPO has signal, and will learn "
            "what that credit rewards (the answer format), not the task. For the task itself: "
            "SFT first, easier data or a larger model.",
            {**checks, "groups with score spread >= 50%": True},
        )
    if accuracy < ACCURACY_SFT_BELOW:
        return Verdict(
            "sft_first",
            f"accuracy {accuracy:.1%} < 5%: almost every group is all-wrong, so GRPO has no "
            "signal. SFT on the format/task first (or use easier data, a larger model, few-shot).",
            checks,
        )
    if accuracy > ACCURACY_TOO_EASY_ABOVE:
        return Verdict(
            "harder_data",
            f"accuracy {accuracy:.1%} > 95%: groups are all-right, advantages are zero. Use "
            "harder data (more numbers, larger targets) or filter to the prompts it still fails.",
            checks,
        )
    if all(checks.values()):
        return Verdict(
            "ready_for_grpo",
            "ready for GRPO: the model is right sometimes and its groups disagree, which is "
            "where group-relative advantages come from.",
            checks,
        )
    failed = ", ".join(name for name, ok in checks.items() if not ok)
    return Verdict(
        "marginal",
        f"marginal ({failed} fails): GRPO may learn slowly. Train on the learnable prompts only "
        "(`filter`), raise the temperature or rollout.n, or adjust the data difficulty.",
        checks,
    )


def compare(base: str, trained: str, output: str | None, force: bool) -> int:
    """The two runs side by side; the per-prompt means with their paired 95% intervals. Runs
    that differ in anything but the model are refused (``paired.check_comparable``)."""
    if output:
        refuse_existing(Path(output), force)
        refuse_output_in_inputs(Path(output), {"BASE": base, "TRAINED": trained})
    check_complete_run(Path(base), "BASE")
    check_complete_run(Path(trained), "TRAINED")
    summaries = load_summary(base), load_summary(trained)
    if summaries[0].header.task != summaries[1].header.task:
        raise EvalError(
            f"BASE {base} is a {summaries[0].header.task} run and TRAINED {trained} a "
            f"{summaries[1].header.task} run: their scores do not compare; pass two runs of one "
            "task"
        )
    # a summary.json given stands for its run folder: the samples are read beside it
    before, after = (
        EvalRunSamples.load(path if Path(path).is_dir() else Path(path).parent, summary)
        for path, summary in zip((base, trained), summaries, strict=True)
    )
    warnings = check_comparable(before, after)
    count = len(before.prompts)
    deltas = deltas_between(before, after) if count > 1 else []
    table = compare_markdown(*summaries, deltas)
    if count < 2:
        warnings.append("warning: one prompt: no interval; evaluate more prompts to judge")
    table += "".join(f"{line}\n" for line in warnings)
    print(table, end="")
    if output:
        with new_file(Path(output), force, needed_bytes=len(table.encode())) as staging:
            staging.write_text(table)
    return 0


def refuse_output_in_inputs(output: Path, inputs: dict[str, str]) -> None:
    """``compare --output`` inside (or equal to) a run it compares would overwrite that run's
    files (``--force`` onto ``BASE/summary.json``); refused. A ``summary.json`` given as input
    stands for its run folder."""
    target = output.resolve()
    for name, given in inputs.items():
        run = Path(given).resolve()
        if run.is_file() and run.name == "summary.json":
            run = run.parent
        if target == run or target.is_relative_to(run):
            raise EvalError(
                f"--output {output}: inside {name} {given}, a run being compared; write the "
                "table outside both runs"
            )

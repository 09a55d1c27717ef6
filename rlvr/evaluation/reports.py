"""Markdown reports: a run's summary, two runs side by side (``compare``), and the
high-value prompts of an analyse run (``stats``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlvr.evaluation.errors import EvalError
from rlvr.evaluation.paired import Interval, PairedDelta
from rlvr.evaluation.records import AnalyseRecord, Recommendations, Summary

# Metrics shown in reports, in order; rates print as percentages.
REPORT_METRICS = (
    ("mean_score", "mean score", "pct"),
    ("pass@1", "pass@1", "pct"),
    ("format_rate", "format rate", "pct"),
    ("accuracy", "accuracy (success rate)", "pct"),
    ("mean_variance", "mean reward variance", "num"),
    ("nonzero_variance_fraction", "prompts with nonzero variance", "pct"),
    ("learnable_fraction", "learnable prompts", "pct"),
    ("mean_outcome_entropy", "mean outcome entropy (bits)", "num"),
    ("mean_token_entropy", "mean token entropy (nats/token)", "num"),
    ("mean_response_tokens", "mean response tokens", "len"),
    ("truncated_rate", "truncated (hit max_tokens)", "pct"),
)
PASSK_KEY = re.compile(r"^pass@(\d+)$")
MAJK_KEY = re.compile(r"^maj@(\d+)$")


def _at_k(summary: Summary, pattern: re.Pattern[str]) -> list[str]:
    """The summary's ``pass@k`` (or ``maj@k``) keys, smallest k first."""
    found = [key for key in summary.metrics if pattern.match(key)]
    return sorted(found, key=lambda key: int(key.split("@")[1]))


def _report_keys(summary: Summary) -> list[tuple[str, str, str]]:
    at_k = [k for k in _at_k(summary, PASSK_KEY) if k != "pass@1"] + _at_k(summary, MAJK_KEY)
    keys = [row for row in REPORT_METRICS if summary.metrics.get(row[0]) is not None]
    return keys[:2] + [(k, k, "pct") for k in at_k] + keys[2:]


def _format(value: float, kind: str) -> str:
    if kind == "pct":
        return f"{value:.2%}"
    return f"{value:.1f}" if kind == "len" else f"{value:.4f}"


def _format_delta(delta: float, kind: str) -> str:
    if kind == "pct":
        return f"{delta * 100:+.2f} pt"
    return f"{delta:+.1f}" if kind == "len" else f"{delta:+.4f}"


def _metric(summary: Summary, key: str) -> float:
    value = summary.metrics.get(key)
    if value is None:
        raise EvalError(f"{summary.header.model}: no {key!r} in its summary")
    return value


def summary_markdown(summary: Summary) -> str:
    """What the CLI prints and ``summary.md`` holds."""
    head, sampling = summary.header, summary.header.sampling
    lines = [
        f"# {head.task} {head.command}: {head.model}",
        "",
        f"{head.prompts} prompts from `{head.data}`, backend {head.backend}, "
        f"n={sampling.get('n')}, temperature={sampling.get('temperature')}, "
        f"max_tokens={sampling.get('max_tokens')}, seed={sampling.get('seed')}.",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    lines += [
        f"| {label} | {_format(_metric(summary, key), kind)} |"
        for key, label, kind in _report_keys(summary)
    ]
    if summary.verdict is not None:
        judged = summary.verdict
        lines += ["", f"**Verdict: {judged.label}.** {judged.advice}", ""]
        lines += [f"- [{'x' if ok else ' '}] {name}" for name, ok in judged.checks.items()]
    if summary.recommendations is not None:
        lines += recommendations_markdown(summary.recommendations)
    return "\n".join(lines) + "\n"


def recommendations_markdown(recommended: Recommendations) -> list[str]:
    """The suggested settings (with the rollout.n table) and the checks, one line each."""
    lines = ["", "## Suggested settings", "", "| setting | now | suggested | why |"]
    lines.append("|---|---|---|---|")
    for item in recommended.settings:
        now = "unset" if item.current is None else str(item.current)
        value = "-" if item.suggested is None else str(item.suggested)
        lines.append(
            f"| `{item.setting}` | {now} ({item.compared_with}) | {value} ({item.action}) | "
            f"{item.reason} |"
        )
    for item in (s for s in recommended.settings if s.table):
        lines += ["", f"Expected share of useful groups by `{item.setting}`:", ""]
        lines += ["| n | " + " | ".join(item.table) + " |", "|---" * (len(item.table) + 1) + "|"]
        lines.append(
            "| useful groups | " + " | ".join(f"{v:.0%}" for v in item.table.values()) + " |"
        )
    lines += ["", "## Checks before a run", ""]
    return lines + [f"- {check.line()}" for check in recommended.checks]


#: The summary metrics that are per-prompt means of a per-sample value: ``paired.PARTS``.
PAIRED_METRICS = {"mean_score": "score", "pass@1": "success", "format_rate": "format"}


def compare_markdown(
    base: Summary,
    trained: Summary,
    deltas: Sequence[PairedDelta] = (),
    names: tuple[str, str] = ("base", "trained"),
) -> str:
    """A side-by-side "Base -> Trained" Markdown table of two summaries, with deltas and, for
    the metrics in ``deltas`` (paired over prompts, ``paired.py``), their 95% intervals. Whether
    the two runs compare at all is ``comparable.check_comparable``'s to say, before."""
    keys = [row for row in _report_keys(base) if trained.metrics.get(row[0]) is not None]
    if not keys:
        raise EvalError("the two summaries share no metrics")
    by_part = {d.part: d for d in deltas}
    lines = [
        f"| metric | {names[0]} | {names[1]} | delta | 95% CI (paired over prompts) |",
        "|---|---|---|---|---|",
    ]
    for key, label, kind in keys:
        b, t = _metric(base, key), _metric(trained, key)
        paired = by_part.get(PAIRED_METRICS.get(key, ""))
        ci = "-" if paired is None else _interval_cell(paired.interval)
        lines.append(
            f"| {label} | {_format(b, kind)} | {_format(t, kind)} | "
            f"{_format_delta(t - b, kind)} | {ci} |"
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


def _interval_cell(ci: Interval) -> str:
    mark = " *" if ci.excludes_zero else ""
    return f"[{ci.low * 100:+.2f}, {ci.high * 100:+.2f}] pt{mark}"


def _interval_line(delta: PairedDelta) -> str:
    """Whether the delta is one these prompts can tell from noise, in words."""
    ci = delta.interval
    said = (
        f"the interval excludes zero: a {'gain' if ci.mean > 0 else 'loss'} on these prompts"
        if ci.excludes_zero
        else "the interval includes zero: no change these prompts can tell from noise"
    )
    return (
        f"- {delta.label}: {ci.mean * 100:+.2f} pt, 95% CI {_interval_cell(ci).rstrip(' *')} "
        f"over {ci.n} prompts; {said}"
    )


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

"""report.md's "Held-out change" section, for a run evaluated before and after training (the
quickstart): pass@1 on the same held-out prompts, the paired difference and its 95% interval,
as ``rlvr.evaluation.paired`` computed them, and whether the interval excludes zero.

It sits near the top of report.md because a short CPU run's training-score curve cannot answer
"did training work": a few small batches per step are noise, while the held-out eval pairs
every prompt before and after."""

from __future__ import annotations

from rlvr.evaluation.paired import Interval, PairedDelta

NOISE_NOTE = (
    "The training-score curve below (the mean reward of each step's few training prompts) is "
    "noise at this size: it can fall while the model improves. The held-out eval above is the "
    "measurement."
)


def _row(name: str, delta: PairedDelta) -> str:
    ci = delta.interval
    zero = "excludes zero" if ci.excludes_zero else "includes zero"
    return (
        f"- {name}: {delta.before:.2%} -> {delta.after:.2%}, {ci.mean * 100:+.2f} pt, "
        f"95% CI [{ci.low * 100:+.2f}, {ci.high * 100:+.2f}] pt ({zero})"
    )


def verdict(name: str, interval: Interval, after: str) -> str:
    """One sentence: does the paired interval exclude zero, and which way."""
    if interval.low > 0.0:
        return (
            f"The 95% interval of {name} excludes zero: on these held-out prompts the {after} "
            "model is right more often, beyond the noise of this many prompts."
        )
    if interval.high < 0.0:
        return (
            f"The 95% interval of {name} excludes zero: on these held-out prompts the {after} "
            "model is right less often, beyond the noise of this many prompts."
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
        verdict("sampled pass@1", sampled.interval, after),
        NOISE_NOTE,
        "",
    ]

"""The training settings an ``analyse`` probe suggests: ``data.max_response_length`` and
``actor_rollout_ref.rollout.n`` (docs/EVALUATION_DESIGN.md, "Suggested settings and checks
before a run", states each rule and why its threshold).

Each suggestion names the value it is compared with: the experiment's, as composed, with
``--experiment``; else the task overlay's (``settings.py``); else the probe's own ``--max_tokens``.
``settings_from_samples`` recomputes them from a recorded run's ``samples.jsonl``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlvr.evaluation.metrics import is_success, prompt_stats
from rlvr.evaluation.records import GradedSample, PromptStats, SuggestedSetting
from rlvr.evaluation.settings import RunSettings

# data.max_response_length
CAP_HIT_RAISE_ABOVE = 0.05  # above 5% of samples at the cap, the cap cuts answers: raise it
LENGTH_QUANTILE = 0.95  # of correct answers' lengths: the long tail a run must not cut
HEADROOM = 1.25  # on that quantile: responses tend to grow during RL (docs)
LOWER_AT_MOST = 0.5  # lower only when the suggestion is at most half the current length
LENGTH_STEPS_FROM = 16  # the smallest suggested length
# actor_rollout_ref.rollout.n
USEFUL_GROUPS_TARGET = 0.5  # docs: where the run report's "most groups with zero spread" is quiet
ROLLOUT_NS = (2, 4, 8, 16)

MAX_RESPONSE_LENGTH = "data.max_response_length"
ROLLOUT_N = "actor_rollout_ref.rollout.n"


@dataclass(frozen=True)
class Current:
    """The value a suggestion is compared with, and where it comes from."""

    value: int | None
    origin: str


def length_step(tokens: float) -> int:
    """The smallest of 16, 24, 32, 48, 64, 96, ... (2^k and 1.5 * 2^k) at or above ``tokens``:
    round numbers for a config, in steps of at most 1.5x rather than doubling."""
    step = LENGTH_STEPS_FROM
    while step < tokens:
        step = step * 3 // 2 if step & (step - 1) == 0 else step * 4 // 3
    return step


def quantile(values: Sequence[int], q: float) -> int:
    """An observed value: the smallest with at least share q of the values at or below it."""
    import numpy as np

    return int(np.quantile(np.asarray(values), q, method="inverted_cdf"))


def suggest_max_response_length(
    samples: Sequence[GradedSample], probe_cap: int, current: Current
) -> SuggestedSetting:
    """From the cap-hit rate and the lengths of correct samples (probed at ``probe_cap``)."""
    capped = sum(s.finish_reason == "length" for s in samples) / len(samples) if samples else 0.0
    correct = [s.response_tokens for s in samples if is_success(s.score)]
    now = current.value if current.value is not None else probe_cap

    def suggest(action: str, value: int | None, reason: str) -> SuggestedSetting:
        return SuggestedSetting(
            setting=MAX_RESPONSE_LENGTH,
            action=action,
            suggested=value,
            current=now,
            compared_with=current.origin,
            reason=reason,
        )

    hit = f"{capped:.0%} of samples hit the probe's {probe_cap}-token cap"
    if capped > CAP_HIT_RAISE_ABOVE and now > probe_cap:
        return suggest(
            "probe again",
            now,
            f"{hit} (> {CAP_HIT_RAISE_ABOVE:.0%}), below the {now} compared with: probe again "
            "at that length (without --max_tokens) before changing it",
        )
    if capped > CAP_HIT_RAISE_ABOVE:
        return suggest(
            "raise",
            length_step(2 * probe_cap),
            f"{hit} (> {CAP_HIT_RAISE_ABOVE:.0%}): cut answers score as wrong, and how long they "
            "would run is unknown; double it, then probe again at the new length",
        )
    if not correct:
        return suggest("keep", now, f"no correct sample to measure; {hit}")
    longest = quantile(correct, LENGTH_QUANTILE)
    needed = length_step(longest * HEADROOM)
    measured = (
        f"{len(correct)} correct samples, {LENGTH_QUANTILE:.0%} of them within {longest} tokens "
        f"(+{HEADROOM - 1:.0%} headroom: {needed}); {hit}"
    )
    if needed > now:
        return suggest("raise", needed, f"{measured}: {now} would cut correct answers")
    if needed <= LOWER_AT_MOST * now:
        return suggest(
            "lower",
            needed,
            f"{measured}: rollout time and activation memory grow with the length",
        )
    return suggest("keep", now, measured)


def useful_group_share(pass_rates: Sequence[float], n: int) -> float:
    """The expected share of groups of n responses holding both a correct and a wrong answer,
    the groups whose GRPO advantages are nonzero: mean over prompts of 1 - p^n - (1-p)^n."""
    if not pass_rates:
        return 0.0
    return sum(1.0 - p**n - (1.0 - p) ** n for p in pass_rates) / len(pass_rates)


def suggest_rollout_n(stats: Sequence[PromptStats], current: Current) -> SuggestedSetting:
    """The smallest n in ``ROLLOUT_NS`` whose expected useful-group share reaches the target,
    from each prompt's pass rate p (its success rate over the probe's samples)."""
    rates = [s.success_rate for s in stats]
    table = {str(n): useful_group_share(rates, n) for n in ROLLOUT_NS}
    reached = [n for n in ROLLOUT_NS if table[str(n)] >= USEFUL_GROUPS_TARGET]
    suggested = reached[0] if reached else None
    target = f"{USEFUL_GROUPS_TARGET:.0%} useful groups (a correct and a wrong answer)"
    if suggested is None:
        largest = ROLLOUT_NS[-1]
        solved = sum(p == 1.0 for p in rates) / len(rates) if rates else 0.0
        failed = sum(p == 0.0 for p in rates) / len(rates) if rates else 0.0
        action = "change the data"
        reason = (
            f"no n up to {largest} reaches {target}: {table[str(largest)]:.0%} at {largest}; "
            f"{solved:.0%} of prompts were always right and {failed:.0%} always wrong, which no "
            "group size makes disagree: see the verdict (harder or easier data, `filter`)"
        )
    else:
        at = table[str(suggested)]
        action = _direction(suggested, current.value)
        reason = f"the smallest n with {target}: {at:.0%} at n={suggested}"
        if current.value is not None and str(current.value) in table:
            reason += f", {table[str(current.value)]:.0%} at the current n={current.value}"
    return SuggestedSetting(
        setting=ROLLOUT_N,
        action=action,
        suggested=suggested,
        current=current.value,
        compared_with=current.origin,
        reason=reason,
        table=table,
    )


def _direction(suggested: int, current: int | None) -> str:
    if current is None:
        return "set"
    return "keep" if suggested == current else ("raise" if suggested > current else "lower")


def suggested_settings(
    graded: Sequence[Sequence[GradedSample]],
    stats: Sequence[PromptStats],
    probe_cap: int,
    training: RunSettings | None,
) -> list[SuggestedSetting]:
    """Both suggestions, compared with the training config's values (``--experiment`` or the
    task overlay); without one, the length with the probe's cap."""
    length = Current(probe_cap, "--max_tokens, the probe's cap")
    rollout_n = Current(None, "no training config")
    if training is not None:
        origin = training.origin
        length = Current(training.max_response_length, origin)
        rollout_n = Current(
            training.rollout_n, origin if training.rollout_n else f"unset in {origin}"
        )
    samples = [s for group in graded for s in group]
    return [
        suggest_max_response_length(samples, probe_cap, length),
        suggest_rollout_n(stats, rollout_n),
    ]


def settings_from_samples(
    samples: Sequence[GradedSample], probe_cap: int, training: RunSettings | None
) -> list[SuggestedSetting]:
    """``suggested_settings`` from a recorded run's samples (``samples.jsonl``, read with
    ``run_folder.read_records``): grouped by prompt, in the order the probe wrote them. Both
    suggestions need only scores, lengths and finish reasons, which the file keeps."""
    groups: dict[int, list[GradedSample]] = {}
    for sample in samples:
        groups.setdefault(sample.prompt_index, []).append(sample)
    stats = [prompt_stats(index, [s.score for s in group]) for index, group in groups.items()]
    return suggested_settings(list(groups.values()), stats, probe_cap, training)

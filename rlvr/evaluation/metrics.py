"""Eval and signal-probing metrics: pass@k, maj@k, per-prompt reward statistics, and the
training settings an ``analyse`` probe suggests (``data.max_response_length`` and
``actor_rollout_ref.rollout.n``; docs/EVALUATION_DESIGN.md, "Suggested settings and checks
before a run", states each rule and why its threshold).

Pure Python on lists of scores, so every number here can be checked by hand. A sample "succeeds"
when its score is exactly 1.0 (the rewards give 1.0 only to a correct answer; format credit and
shaping stay below it).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rlvr.evaluation.records import (
    AnalyseRecord,
    GradedSample,
    PromptStats,
    SuggestedSetting,
)
from rlvr.evaluation.settings import RunSettings

# The signal-probing guidance of github.com/luohao-brian/verl-study (README, "Signal Probing";
# docs/EVALUATION_DESIGN.md explains each threshold).
ACCURACY_RANGE = (0.10, 0.80)
ACCURACY_SFT_BELOW = 0.05
ACCURACY_TOO_EASY_ABOVE = 0.95
VARIANCE_MIN = 0.05
ENTROPY_RANGE = (0.2, 0.8)
# Below ACCURACY_SFT_BELOW, partial credit still gives GRPO a signal when at least this share of
# groups disagree in score (docs/OPTIMIZATION_COUNTDOWN.md, "CPU recipe", measured it at 84%).
PARTIAL_CREDIT_SPREAD_MIN = 0.5


def is_success(score: float) -> bool:
    return score == 1.0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c successes: 1 - C(n-c, k) / C(n, k).

    The chance that k samples drawn without replacement from the n contain a success.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    # The product form avoids huge binomials: C(n-c, k)/C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i).
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def binary_entropy(p: float) -> float:
    """Entropy in bits of a success/failure outcome with success rate p (0 at p=0 or 1; 1 at .5)."""
    if p <= 0.0 or p >= 1.0:
        return 0.0
    return -(p * math.log2(p) + (1.0 - p) * math.log2(1.0 - p))


def variance(values: Sequence[float]) -> float:
    """Population variance (divide by n), the spread GRPO's group normalisation sees."""
    average = mean(values)
    return mean([(v - average) ** 2 for v in values])


def prompt_stats(
    index: int, scores: Sequence[float], logprobs: Sequence[Sequence[float]] | None = None
) -> PromptStats:
    """Statistics of one prompt's group; ``logprobs`` are the sampled tokens' log-probabilities.

    The token entropy is the Monte-Carlo estimate E[-log p(token)] over all sampled tokens of
    the group, which is the policy's per-token entropy when sampling at temperature 1.
    """
    if not scores:
        raise ValueError(f"prompt {index}: no scores")
    rate = sum(is_success(s) for s in scores) / len(scores)
    token_entropy = None
    if logprobs is not None:
        tokens = [lp for sample in logprobs for lp in sample]
        token_entropy = -sum(tokens) / len(tokens) if tokens else 0.0
    return PromptStats(
        prompt_index=index,
        n=len(scores),
        mean_score=sum(scores) / len(scores),
        success_rate=rate,
        variance=variance(scores),
        outcome_entropy=binary_entropy(rate),
        token_entropy=token_entropy,
    )


def is_learnable(
    stats: PromptStats, var_min: float = VARIANCE_MIN, entropy_min: float = ENTROPY_RANGE[0]
) -> bool:
    """A prompt GRPO can learn from: its group disagrees (variance and outcome entropy high)."""
    return stats.variance > var_min and stats.outcome_entropy >= entropy_min


def mean(values: Sequence[float]) -> float:
    """The mean, 0.0 for no values (an empty eval reports zeros rather than failing)."""
    return sum(values) / len(values) if values else 0.0


def passk_summary(success_counts: Sequence[int], n: int, ks: Sequence[int]) -> dict[str, float]:
    """Mean unbiased pass@k over prompts, for each k (``{"pass@1": ..., "pass@4": ...}``)."""
    return {f"pass@{k}": mean([pass_at_k(n, c, k) for c in success_counts]) for k in ks}


Vote = tuple[str | None, bool]  # one sample's answer (None: it gives none) and its success


def maj_at_k(votes: Sequence[Vote], k: int) -> float:
    """maj@k from n samples: the chance that a majority vote over k of them, drawn without
    replacement, picks a correct answer (exact over all C(n, k) subsets, like ``pass_at_k``).

    Samples vote for their answer; answerless ones (None) abstain. The answer with the most votes
    wins; a tie is split evenly (each of j tied answers wins with chance 1/j); when every drawn
    sample abstains nothing wins, which counts as wrong. An answer is correct when its samples
    succeed; should a reward's answer key and grader disagree, the answer's succeeding and failing
    samples vote as two answers, so each sample still votes with its own grade.

    Cost: per correct answer and vote count, a knapsack over the other answers (at worst
    answers x k^2 integer steps): milliseconds per prompt for n <= 64, seconds at n = 256 with
    k = n/2. k = n, a single subset, is counted directly.
    """
    n = len(votes)
    if not 1 <= k <= n:
        raise ValueError(f"maj@k needs 1 <= k <= n (n={n}, k={k})")
    answers = Counter((key, ok) for key, ok in votes if key is not None)
    if k == n:  # one subset: the plain majority of all n
        top = max(answers.values(), default=0)
        winners = [ok for (_, ok), size in answers.items() if size == top]
        return sum(winners) / len(winners) if winners else 0.0
    abstaining = n - sum(answers.values())
    # Tie shares 1/(j+1) over a common denominator keep every sum an exact integer.
    denominator = math.lcm(*range(1, min(len(answers), k) + 1))
    won = 0  # over all k-subsets: correct winners x denominator / winners
    for (key, correct), size in answers.items():
        if not correct:
            continue
        others = [m for answer, m in answers.items() if answer != (key, correct)]
        for drawn in range(1, min(size, k) + 1):  # the correct answer's votes in the subset
            ties = _tie_counts(others, abstaining, drawn, k - drawn)
            shares = sum(ways * (denominator // (j + 1)) for j, ways in enumerate(ties))
            won += math.comb(size, drawn) * shares
    return won / (denominator * math.comb(n, k))


def _tie_counts(sizes: Sequence[int], abstaining: int, cap: int, draws: int) -> list[int]:
    """``counts[j]``: the ways to draw ``draws`` samples from the abstentions and from answers of
    the given sizes with no answer above ``cap`` votes and exactly j answers at ``cap``.

    Abstentions and answers smaller than ``cap`` can be drawn freely (they can neither beat nor
    tie it), so they form one pool; a knapsack runs over the others (no subsets enumerated):
    ``ways[s][j]`` counts draws of s samples so far with j answers at the cap.
    """
    free = abstaining + sum(m for m in sizes if m < cap)
    ways = [[math.comb(free, s)] for s in range(draws + 1)]
    most_ties = draws // cap
    for size in (m for m in sizes if m >= cap):
        grown = [[0] * min(len(ways[0]) + 1, most_ties + 1) for _ in range(draws + 1)]
        for s, by_ties in enumerate(ways):
            for taken in range(min(cap, draws - s) + 1):
                choose, row, tied = math.comb(size, taken), grown[s + taken], int(taken == cap)
                # j + tied answers at the cap need (j + tied) * cap <= draws samples: the rest is 0
                for j, count in enumerate(by_ties[: len(row) - tied]):
                    row[j + tied] += choose * count
        ways = grown
    return ways[draws]


def analyse_summary(stats: Sequence[PromptStats]) -> dict[str, float | None]:
    """Overall signal of a probe: accuracy, mean variance, learnable fraction, entropies."""
    token_entropies = [s.token_entropy for s in stats if s.token_entropy is not None]
    return {
        "accuracy": mean([s.success_rate for s in stats]),
        "mean_score": mean([s.mean_score for s in stats]),
        "mean_variance": mean([s.variance for s in stats]),
        "nonzero_variance_fraction": mean([float(s.variance > 0.0) for s in stats]),
        "learnable_fraction": mean([float(is_learnable(s)) for s in stats]),
        "mean_outcome_entropy": mean([s.outcome_entropy for s in stats]),
        "mean_token_entropy": mean(token_entropies) if token_entropies else None,
    }


def high_value_prompts(
    records: list[AnalyseRecord], var_min: float, entropy_min: float
) -> list[AnalyseRecord]:
    """The learnable prompts, most informative (highest variance) first."""
    chosen = [r for r in records if is_learnable(r, var_min, entropy_min)]
    return sorted(chosen, key=lambda r: (-r.variance, r.prompt_index))


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
    import numpy as np  # an observed length: the smallest with this share at or below it

    longest = int(np.quantile(np.asarray(correct), LENGTH_QUANTILE, method="inverted_cdf"))
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
    return mean([1.0 - p**n - (1.0 - p) ** n for p in pass_rates])


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
    ``records.read_records``): grouped by prompt, in the order the probe wrote them. Both
    suggestions need only scores, lengths and finish reasons, which the file keeps."""
    groups: dict[int, list[GradedSample]] = {}
    for sample in samples:
        groups.setdefault(sample.prompt_index, []).append(sample)
    stats = [prompt_stats(index, [s.score for s in group]) for index, group in groups.items()]
    return suggested_settings(list(groups.values()), stats, probe_cap, training)

"""Eval and signal-probing metrics: pass@k, maj@k, per-prompt reward statistics, the verdict.

Pure Python on lists of scores, so every number here can be checked by hand. A sample "succeeds"
when its score is exactly 1.0 (the rewards give 1.0 only to a correct answer; format credit and
shaping stay below it).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from rlvr.evaluation.records import AnalyseRecord, PromptStats, Verdict

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
    if not values:
        return 0.0
    average = sum(values) / len(values)
    return sum((v - average) ** 2 for v in values) / len(values)


def prompt_stats(
    index: int, scores: Sequence[float], logprobs: Sequence[Sequence[float]] | None = None
) -> PromptStats:
    """Statistics of one prompt's group; ``logprobs`` are the sampled tokens' log-probabilities.

    The token entropy is the Monte-Carlo estimate E[-log p(token)] over all sampled tokens of
    the group, which is the policy's per-token entropy when sampling at temperature 1.
    """
    if not scores:
        raise ValueError(f"prompt {index}: no scores")
    successes = sum(is_success(s) for s in scores)
    rate = successes / len(scores)
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


def high_value_prompts(
    records: list[AnalyseRecord], var_min: float, entropy_min: float
) -> list[AnalyseRecord]:
    """The learnable prompts, most informative (highest variance) first."""
    chosen = [r for r in records if is_learnable(r, var_min, entropy_min)]
    return sorted(chosen, key=lambda r: (-r.variance, r.prompt_index))

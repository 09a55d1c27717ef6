"""The statistics stage: what a run's graded samples say, and what two runs say together.

- ``passk``: the unbiased pass@k and maj@k per prompt and overall;
- ``analyse`` (the signal probe): per-prompt reward variance and outcome entropy, the verdict,
  and the training settings the probe suggests (``data.max_response_length``,
  ``actor_rollout_ref.rollout.n``; docs/EVALUATION_DESIGN.md, "Suggested settings and checks
  before a run", states each rule and why its threshold);
- ``compare``: paired before/after deltas with a 95% interval over prompts, for runs that
  differ in the model alone; ``stats``/``filter``: the learnable prompts of an analyse run.

Pure Python on lists of scores, so every number here can be checked by hand. A sample "succeeds"
when its score is exactly 1.0 (the rewards give 1.0 only to a correct answer; format credit and
shaping stay below it).

Paired deltas: for each prompt, the mean of a per-sample value (score, success, format) over its
samples after training minus the same mean before. The delta is the mean of those per-prompt
differences, and its interval is the paired Student t interval over prompts,
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
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlvr.evaluation import EvalError
from rlvr.evaluation.run_folder import (
    FINGERPRINT_KEYS,
    AnalyseRecord,
    GradedSample,
    PassKRecord,
    PromptStats,
    RunHeader,
    SuggestedSetting,
    Summary,
    Verdict,
    format_delta,
    format_value,
    load_summary,
    metric_value,
    read_records,
    report_keys,
)
from rlvr.evaluation.settings import RunSettings, SamplingSettings

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
    # module (for the run's fingerprint) though only comparisons compute an interval.
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
    before_dir: str | Path, after_dir: str | Path, parts: Sequence[str] = tuple(PARTS)
) -> list[PairedDelta]:
    """Each part's mean before and after (a mean over prompts of per-prompt means) and the
    paired delta's 95% t interval over prompts. Raises ``EvalError`` on unpairable runs."""
    before, after = EvalRunSamples.load(before_dir), EvalRunSamples.load(after_dir)
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


def high_value_prompts(
    records: list[AnalyseRecord], var_min: float, entropy_min: float
) -> list[AnalyseRecord]:
    """The learnable prompts, most informative (highest variance) first."""
    chosen = [r for r in records if is_learnable(r, var_min, entropy_min)]
    return sorted(chosen, key=lambda r: (-r.variance, r.prompt_index))


#: The summary metrics that are per-prompt means of a per-sample value: ``PARTS``.
PAIRED_METRICS = {"mean_score": "score", "pass@1": "success", "format_rate": "format"}


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


def interval_cell(ci: Interval, mark: bool = True) -> str:
    """``[low, high] pt`` in percentage points, `` *`` when it excludes zero (and ``mark``)."""
    star = " *" if mark and ci.excludes_zero else ""
    return f"[{ci.low * 100:+.2f}, {ci.high * 100:+.2f}] pt{star}"


def _interval_line(delta: PairedDelta) -> str:
    """Whether the delta is one these prompts can tell from noise, in words."""
    ci = delta.interval
    said = (
        f"the interval excludes zero: a {'gain' if ci.mean > 0 else 'loss'} on these prompts"
        if ci.excludes_zero
        else "the interval includes zero: no change these prompts can tell from noise"
    )
    return (
        f"- {delta.label}: {ci.mean * 100:+.2f} pt, 95% CI {interval_cell(ci, mark=False)} "
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
        f"95% CI {interval_cell(ci, mark=False)} ({zero})"
    )


def interval_verdict(name: str, interval: Interval, after: str) -> str:
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
        "is paired over prompts (Student t 95% interval, rlvr/evaluation/statistics.py).",
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

"""Eval metrics against hand-computed values and brute-force enumeration."""

from __future__ import annotations

import itertools
import math
import random
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.evaluation import metrics, statistics


def _pass_at_k_brute_force(n: int, c: int, k: int) -> float:
    """Fraction of all k-subsets of n samples (c of them correct) holding a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 11))
def test_pass_at_k_equals_enumeration(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            expected = _pass_at_k_brute_force(n, c, k)
            assert metrics.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)


def test_pass_at_k_known_values() -> None:
    assert metrics.pass_at_k(16, 0, 16) == 0.0
    assert metrics.pass_at_k(16, 1, 16) == 1.0
    assert metrics.pass_at_k(16, 4, 1) == pytest.approx(0.25)  # pass@1 is the success rate
    assert metrics.pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2)
    assert 0.0 < metrics.pass_at_k(200, 1, 100) <= 1.0  # large n stays finite


@pytest.mark.parametrize("n,c,k", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        metrics.pass_at_k(n, c, k)


@given(st.integers(1, 64).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_k_grows_with_k(nc: tuple[int, int]) -> None:
    n, c = nc
    values = [metrics.pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(a <= b + 1e-12 for a, b in itertools.pairwise(values))


def test_binary_entropy() -> None:
    assert metrics.binary_entropy(0.0) == 0.0
    assert metrics.binary_entropy(1.0) == 0.0
    assert metrics.binary_entropy(0.5) == pytest.approx(1.0)
    assert metrics.binary_entropy(0.25) == pytest.approx(0.8112781244591328)
    assert metrics.binary_entropy(0.25) == pytest.approx(metrics.binary_entropy(0.75))


def test_variance_is_population_variance() -> None:
    assert metrics.variance([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.1875)  # p(1-p), p=1/4
    assert metrics.variance([1.0, 1.0, 0.1, 0.0]) == pytest.approx(0.9075 / 4)  # mean 0.525
    assert metrics.variance([0.1] * 8) == pytest.approx(0.0)
    assert metrics.variance([]) == 0.0


def test_prompt_stats_by_hand() -> None:
    # scores: 2 correct, 1 well-formed wrong (0.1), 1 without an answer
    stats = metrics.prompt_stats(7, [1.0, 0.1, 1.0, 0.0], [[-0.5, -1.5], [-1.0], [], [-2.0]])
    assert stats.prompt_index == 7 and stats.n == 4
    assert stats.mean_score == pytest.approx(0.525)
    assert stats.success_rate == 0.5
    assert stats.variance == pytest.approx((0.475**2 * 2 + 0.425**2 + 0.525**2) / 4)
    assert stats.outcome_entropy == pytest.approx(1.0)
    assert stats.token_entropy == pytest.approx(5.0 / 4)  # -(sum of logprobs) / tokens
    assert metrics.prompt_stats(0, [0.0, 0.0]).token_entropy is None
    with pytest.raises(ValueError):
        metrics.prompt_stats(0, [])


def test_learnable_uses_both_thresholds() -> None:
    split = metrics.prompt_stats(0, [1.0, 0.0, 1.0, 0.0])  # variance 0.25, entropy 1
    solved = metrics.prompt_stats(1, [1.0] * 4)
    formatted = metrics.prompt_stats(2, [0.1, 0.0, 0.1, 0.0])  # variance 0.0025
    assert metrics.is_learnable(split)
    assert not metrics.is_learnable(solved)
    assert not metrics.is_learnable(formatted)
    assert metrics.is_learnable(formatted, var_min=0.001, entropy_min=0.0)
    rare = metrics.prompt_stats(3, [1.0] + [0.0] * 31)  # variance 0.03, entropy 0.20
    assert not metrics.is_learnable(rare)
    assert metrics.is_learnable(rare, var_min=0.02, entropy_min=0.19)


def test_analyse_and_passk_summaries() -> None:
    stats = [
        metrics.prompt_stats(0, [1.0, 1.0, 1.0, 1.0], [[-0.1]] * 4),
        metrics.prompt_stats(1, [1.0, 0.0, 1.0, 0.0], [[-1.0]] * 4),
        metrics.prompt_stats(2, [0.0, 0.0, 0.0, 0.0], [[-2.0]] * 4),
    ]
    summary = metrics.analyse_summary(stats)
    assert "prompts" not in summary  # the run header counts prompts, once
    assert summary["accuracy"] == pytest.approx(0.5)
    assert summary["mean_variance"] == pytest.approx(0.25 / 3)
    assert summary["nonzero_variance_fraction"] == pytest.approx(1 / 3)
    assert summary["learnable_fraction"] == pytest.approx(1 / 3)
    assert summary["mean_outcome_entropy"] == pytest.approx(1 / 3)
    assert summary["mean_token_entropy"] == pytest.approx((0.1 + 1.0 + 2.0) / 3)
    passk = metrics.passk_summary([4, 2, 0], n=4, ks=[1, 2])
    assert passk == {"pass@1": pytest.approx(0.5), "pass@2": pytest.approx((1 + 5 / 6) / 3)}


@pytest.mark.parametrize(
    "accuracy,variance,entropy,label",
    [
        (0.0, 0.0, 0.0, "sft_first"),
        (0.049, 0.04, 0.3, "sft_first"),
        (0.96, 0.01, 0.1, "harder_data"),
        (0.40, 0.12, 0.6, "ready_for_grpo"),
        (0.10, 0.051, 0.2, "ready_for_grpo"),  # every bound inclusive on the right side
        (0.80, 0.06, 0.8, "ready_for_grpo"),
        (0.40, 0.05, 0.6, "marginal"),  # variance must exceed 0.05
        (0.07, 0.06, 0.3, "marginal"),  # between SFT-first and the 10% bound
        (0.90, 0.06, 0.4, "marginal"),
        (0.50, 0.10, 0.9, "marginal"),  # entropy above 0.8
    ],
)
def test_verdict_thresholds(accuracy: float, variance: float, entropy: float, label: str) -> None:
    judged = statistics.verdict(accuracy, variance, entropy)
    assert judged.label == label, judged
    assert judged.advice
    if label == "ready_for_grpo":
        assert all(judged.checks.values())
    if label == "marginal":
        assert not all(judged.checks.values())


@pytest.mark.parametrize(
    "accuracy,spread,label",
    [
        (0.0, 0.84, "partial_credit"),  # the CPU recipe's probe: format credit splits the groups
        (0.049, 0.5, "partial_credit"),
        (0.0, 0.49, "sft_first"),  # negative control: too few groups disagree
        (0.0, 0.0, "sft_first"),
        (0.40, 1.0, "marginal"),  # above 5% accuracy the success-based rules decide
    ],
)
def test_verdict_partial_credit(accuracy: float, spread: float, label: str) -> None:
    judged = statistics.verdict(accuracy, 0.0017, 0.0 if accuracy == 0 else 0.5, spread)
    assert judged.label == label, judged
    if label == "partial_credit":
        assert "not the task" in judged.advice


def test_outcome_entropy_matches_seed_scale() -> None:
    # verl-study's 0.2-0.8 entropy band (github.com/luohao-brian/verl-study, README), read as
    # outcome entropy in bits, is success rates of about 3%-24% (or 76%-97%): the same band the
    # accuracy guidance describes.
    low = next(p / 1000 for p in range(1, 500) if metrics.binary_entropy(p / 1000) >= 0.2)
    high = next(p / 1000 for p in range(1, 500) if metrics.binary_entropy(p / 1000) >= 0.8)
    assert 0.02 < low < 0.04 and 0.23 < high < 0.25
    assert not math.isnan(metrics.binary_entropy(1e-300))


# --- maj@k ---------------------------------------------------------------------------------------


def _maj_at_k_brute_force(votes: list[metrics.Vote], k: int) -> float:
    """Every k-subset voted on: the most-voted answer wins, ties split evenly, abstentions
    (None) never vote, and a subset of abstentions only is wrong."""
    total = 0.0
    subsets = list(itertools.combinations(votes, k))
    for subset in subsets:
        tally = Counter(vote for vote in subset if vote[0] is not None)
        if tally:
            top = max(tally.values())
            winners = [ok for (_, ok), count in tally.items() if count == top]
            total += sum(winners) / len(winners)
    return total / len(subsets)


def _random_votes(rng: random.Random, n: int) -> list[metrics.Vote]:
    """n samples over a few answers, at most one of them correct, some abstaining."""
    answers = rng.randint(1, 4)
    correct = rng.randrange(answers + 1)  # == answers: no correct answer
    abstain = rng.random() * 0.5
    return [
        (None, False) if rng.random() < abstain else (f"a{a}", a == correct)
        for a in (rng.randrange(answers) for _ in range(n))
    ]


@pytest.mark.parametrize("seed", range(8))
def test_maj_at_k_equals_enumeration(seed: int) -> None:
    rng = random.Random(seed)
    ties = 0
    for _ in range(150):
        n = rng.randint(1, 10)
        votes = _random_votes(rng, n)
        for k in range(1, n + 1):
            expected = _maj_at_k_brute_force(votes, k)
            assert metrics.maj_at_k(votes, k) == pytest.approx(expected, abs=1e-12), (votes, k)
        counts = Counter(v for v in votes if v[0] is not None).values()
        ties += len(counts) > 1 and len(set(counts)) < len(counts)
    assert ties > 10  # the cases do exercise ties


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([None, "a", "b", "c"]), st.booleans()), min_size=1, max_size=9
    ),
    st.integers(1, 9),
)
def test_maj_at_k_equals_enumeration_any_grades(raw: list[metrics.Vote], k: int) -> None:
    """Also when the key and the grade disagree (several correct answers, a key both right and
    wrong, a successful abstention): each sample votes with its own grade."""
    k = min(k, len(raw))
    assert metrics.maj_at_k(raw, k) == pytest.approx(_maj_at_k_brute_force(raw, k), abs=1e-12)


def test_maj_at_k_by_hand() -> None:
    right, wrong, none = ("13", True), ("7", False), (None, False)
    assert metrics.maj_at_k([right, wrong], 2) == 0.5  # a tie is split evenly
    assert metrics.maj_at_k([right, wrong, ("9", False)], 3) == pytest.approx(1 / 3)
    assert metrics.maj_at_k([right, none, none], 3) == 1.0  # abstentions never outvote
    assert metrics.maj_at_k([none, none], 2) == 0.0  # all abstain: wrong
    assert metrics.maj_at_k([right, wrong, wrong], 3) == 0.0  # wrong 2:1
    # (R, W, W, none), k=2: R+W ties twice (1/2 each), R+none once, of 6 pairs
    assert metrics.maj_at_k([right, wrong, wrong, none], 2) == pytest.approx(2 / 6)
    # the negative control: pass@2 of the same samples counts any success, so it is higher
    assert metrics.pass_at_k(4, 1, 2) == pytest.approx(3 / 6)


@given(st.integers(0, 10**6))
def test_maj_at_1_is_the_success_rate_and_maj_at_n_the_plain_majority(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    votes = _random_votes(rng, n)
    assert metrics.maj_at_k(votes, 1) == pytest.approx(sum(ok for _, ok in votes) / n)
    tally = Counter(v for v in votes if v[0] is not None)
    top = max(tally.values(), default=0)
    winners = [ok for (_, ok), count in tally.items() if count == top]
    majority = sum(winners) / len(winners) if winners else 0.0
    assert metrics.maj_at_k(votes, n) == pytest.approx(majority)
    assert 0.0 <= metrics.maj_at_k(votes, rng.randint(1, n)) <= 1.0


def test_maj_at_k_is_fast_for_large_groups() -> None:
    """No subsets are enumerated: C(64, 32) ~ 1.8e18 of them here."""
    rng = random.Random(0)
    votes = [(str(rng.randrange(20)), False) for _ in range(60)] + [("right", True)] * 4
    start = time.perf_counter()
    values = [metrics.maj_at_k(votes, k) for k in (1, 4, 8, 16, 32, 64)]
    assert time.perf_counter() - start < 2.0
    assert values[0] == pytest.approx(4 / 64) and values[-1] == 0.0  # "right" (4) is outvoted


@pytest.mark.parametrize("n,k", [(4, 0), (4, 5), (0, 1)])
def test_maj_at_k_rejects_impossible_k(n: int, k: int) -> None:
    with pytest.raises(ValueError, match="maj@k"):
        metrics.maj_at_k([("a", True)] * n, k)

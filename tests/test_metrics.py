"""Eval metrics against hand-computed values and brute-force enumeration."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.evaluation import metrics


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
    judged = metrics.verdict(accuracy, variance, entropy)
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
    judged = metrics.verdict(accuracy, 0.0017, 0.0 if accuracy == 0 else 0.5, spread)
    assert judged.label == label, judged
    if label == "partial_credit":
        assert "not the task" in judged.advice


def test_outcome_entropy_matches_seed_scale() -> None:
    # The seed's 0.2-0.8 entropy band, read as outcome entropy in bits, is success rates of
    # about 3%-24% (or 76%-97%): the same band the accuracy guidance describes.
    low = next(p / 1000 for p in range(1, 500) if metrics.binary_entropy(p / 1000) >= 0.2)
    high = next(p / 1000 for p in range(1, 500) if metrics.binary_entropy(p / 1000) >= 0.8)
    assert 0.02 < low < 0.04 and 0.23 < high < 0.25
    assert not math.isnan(metrics.binary_entropy(1e-300))

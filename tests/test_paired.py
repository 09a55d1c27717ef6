"""Paired before/after deltas (rlvr/evaluation/paired.py): the t interval against printed
tables, the pairing, and the refusals."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

import pytest

from rlvr.evaluation import EvalError
from rlvr.evaluation.paired import paired_deltas, paired_t_interval
from rlvr.evaluation.records import GradedSample, JSONValue, RunHeader, Summary, write_jsonl


@pytest.mark.parametrize(
    ("df", "expected"),
    # two-sided 95% critical values from printed t tables
    [(1, 12.7062), (2, 4.3027), (3, 3.1824), (5, 2.5706), (10, 2.2281), (30, 2.0423)],
)
def test_interval_uses_the_tables_t_quantile(df: int, expected: float) -> None:
    differences = [float(i % 3) for i in range(df + 1)]  # df + 1 prompts, some spread
    interval = paired_t_interval(differences)
    standard_error = statistics.stdev(differences) / math.sqrt(len(differences))
    assert (interval.high - interval.mean) / standard_error == pytest.approx(expected, abs=1e-4)
    assert (interval.mean - interval.low) / standard_error == pytest.approx(expected, abs=1e-4)


def test_interval_by_hand() -> None:
    # mean 0.25; sd (n-1) = sqrt(0.05 / 3) = 0.1290994; half = 3.1824463 * 0.1290994 / 2
    interval = paired_t_interval([0.1, 0.3, 0.2, 0.4])
    half = 3.1824463 * math.sqrt(0.05 / 3) / 2
    assert interval.mean == pytest.approx(0.25)
    assert (interval.low, interval.high) == pytest.approx((0.25 - half, 0.25 + half), abs=1e-6)
    assert interval.excludes_zero and interval.n == 4


def test_interval_includes_zero_for_a_symmetric_change() -> None:
    interval = paired_t_interval([0.2, -0.2, 0.1, -0.1, 0.3, -0.3])
    assert interval.mean == pytest.approx(0.0, abs=1e-12)
    assert interval.low < 0.0 < interval.high and not interval.excludes_zero


def test_interval_needs_two_prompts_and_handles_no_spread() -> None:
    with pytest.raises(EvalError):
        paired_t_interval([0.5])
    flat = paired_t_interval([0.1, 0.1, 0.1])
    assert (flat.low, flat.mean, flat.high) == pytest.approx((0.1, 0.1, 0.1))


# ---------------------------------------------------------------- run folders


def _truth(index: int) -> dict[str, JSONValue]:
    return {"target": 10 + index, "numbers": [index, 10]}


def write_run(
    folder: Path,
    scores: Sequence[Sequence[float]],
    temperature: float = 1.0,
    truths: Sequence[dict[str, JSONValue]] | None = None,
) -> Path:
    """An eval run folder where prompt i's samples score ``scores[i]``."""
    folder.mkdir(parents=True)
    header = RunHeader(
        command="analyse",
        task="countdown",
        model=str(folder),
        data="test.parquet",
        prompts=len(scores),
        backend="hf",
        sampling={
            "n": len(scores[0]),
            "temperature": temperature,
            "top_p": 1.0,
            "max_tokens": 32,
            "seed": 0,
        },
        reward_kwargs={"format_score": 0.1, "shaping": False},
        template_kwargs={},
    )
    (folder / "summary.json").write_text(json.dumps(Summary(header, {}).to_json()))
    samples = [
        GradedSample(
            prompt_index=index,
            sample=j,
            ground_truth=truths[index] if truths else _truth(index),
            prompt_tokens=20,
            response="<answer>1 + 2</answer>" if score > 0 else "no",
            response_tokens=8,
            finish_reason="stop",
            mean_neg_logprob=1.0,
            parts={"score": score, "format": float(score > 0)},
        ).to_json()
        for index, group in enumerate(scores)
        for j, score in enumerate(group)
    ]
    write_jsonl(folder / "samples.jsonl", reversed(samples))  # order on disk must not matter
    return folder


def test_paired_deltas_by_hand(tmp_path: Path) -> None:
    before = write_run(tmp_path / "b", [[0.0, 0.1], [0.1, 0.1], [0.0, 0.0], [1.0, 0.0]])
    after = write_run(tmp_path / "a", [[0.1, 1.0], [0.1, 1.0], [0.1, 0.0], [1.0, 0.1]])
    score, success, fmt = paired_deltas(before, after)
    # per-prompt mean score after minus before: 0.5, 0.45, 0.05, 0.05
    expected = paired_t_interval([0.5, 0.45, 0.05, 0.05])
    got = score.interval
    assert (got.low, got.mean, got.high) == pytest.approx(
        (expected.low, expected.mean, expected.high)
    )
    assert score.before == pytest.approx((0.05 + 0.1 + 0.0 + 0.5) / 4)
    assert score.after == pytest.approx((0.55 + 0.55 + 0.05 + 0.55) / 4)
    assert score.after - score.before == pytest.approx(expected.mean)
    # success (score == 1): 1/2 - 0, 1/2 - 0, 0, 1/2 - 1/2
    assert success.interval.mean == pytest.approx(0.25)
    # format: 1 - 1/2, 1 - 1, 1/2 - 0, 1 - 1/2
    assert fmt.interval.mean == pytest.approx(0.375)
    assert score.to_json()["ci95"] == pytest.approx([expected.low, expected.high])


def test_runs_on_different_data_are_refused(tmp_path: Path) -> None:
    before = write_run(tmp_path / "b", [[0.0], [0.1], [0.0]])
    other = [_truth(0), _truth(1), {"target": 99, "numbers": [1, 2]}]
    after = write_run(tmp_path / "a", [[0.0], [0.1], [0.0]], truths=other)
    with pytest.raises(EvalError, match="different data"):
        paired_deltas(before, after)
    fewer = write_run(tmp_path / "f", [[0.0], [0.1]])
    with pytest.raises(EvalError, match="different data"):
        paired_deltas(before, fewer)


def test_a_before_run_on_the_first_prompts_pairs_over_those_alone(tmp_path: Path) -> None:
    """The quickstart probes the base model on the first of the SFT run's prompts: with
    ``before_is_subset`` the delta is over those; without it, or where ``before`` holds a prompt
    the other lacks, the runs are refused (the negative controls)."""
    first = write_run(tmp_path / "first", [[0.0, 0.0], [0.0, 1.0]])
    every = write_run(tmp_path / "every", [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    success = {d.part: d for d in paired_deltas(first, every, before_is_subset=True)}["success"]
    # per prompt after minus before, prompts 0 and 1 only: 1 - 0, 1 - 1/2
    assert success.interval.n == 2 and success.interval.mean == pytest.approx(0.75)
    assert (success.before, success.after) == pytest.approx((0.25, 1.0))
    with pytest.raises(EvalError, match="different data"):
        paired_deltas(first, every)
    other = write_run(tmp_path / "other", [[0.0], [0.0]], truths=[_truth(0), _truth(7)])
    one_each = write_run(tmp_path / "one_each", [[0.0], [1.0], [1.0]])
    with pytest.raises(EvalError, match="different data"):
        paired_deltas(other, one_each, before_is_subset=True)


def test_runs_sampled_differently_are_refused(tmp_path: Path) -> None:
    before = write_run(tmp_path / "b", [[0.0, 0.1], [0.1, 0.0]])
    colder = write_run(tmp_path / "a", [[0.0, 0.1], [0.1, 0.0]], temperature=0.7)
    with pytest.raises(EvalError, match="temperature"):
        paired_deltas(before, colder)


def test_a_folder_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    before = write_run(tmp_path / "b", [[0.0], [0.1]])
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvalError, match=r"summary\.json"):
        paired_deltas(before, tmp_path / "empty")

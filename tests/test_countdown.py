"""Countdown data prep: generator, solver, sources, split policy, rows, and the golden check."""

from __future__ import annotations

import functools
import json
import random
import time
from pathlib import Path

import pandas as pd
import pytest

from rewards import countdown as countdown_reward
from rewards.countdown import compute_score
from rlvr.data.prep import DataPrepError
from rlvr.tasks import countdown
from rlvr.tasks.countdown import prepare
from rlvr.tasks.countdown_puzzles import (
    GeneratorSpec,
    Puzzle,
    SolverGaveUp,
    generate_puzzles,
    solve,
    split_puzzles,
)


def test_generator_is_deterministic_and_in_spec() -> None:
    spec = GeneratorSpec(num_range=(3, 5), max_number=50, target_range=(10, 300), seed=7)
    first = generate_puzzles(2000, spec)
    assert first == generate_puzzles(2000, spec)
    assert first != generate_puzzles(2000, GeneratorSpec((3, 5), 50, (10, 300), seed=8))
    assert {len(t.numbers) for t in first} == {3, 4, 5}
    assert all(1 <= n <= 50 for t in first for n in t.numbers)
    assert all(10 <= t.target <= 300 for t in first)


def test_every_generated_solution_scores_one() -> None:
    for task in generate_puzzles(3000, GeneratorSpec(seed=1)):
        gt = {"target": task.target, "numbers": list(task.numbers)}
        assert (
            compute_score("countdown", f"<answer>{task.solution}</answer>", gt)["score"] == 1.0
        ), task


def test_sizes_are_balanced() -> None:
    hist = countdown.numbers_histogram(generate_puzzles(4000, GeneratorSpec(seed=3)))
    assert abs(hist[3] - hist[4]) < 300


def test_generator_reports_impossible_ranges() -> None:
    with pytest.raises(DataPrepError, match="target_range"):
        generate_puzzles(1, GeneratorSpec(num_range=(2, 2), max_number=1, target_range=(50, 60)))
    with pytest.raises(DataPrepError, match="num_range"):
        GeneratorSpec(num_range=(1, 3))


@pytest.mark.parametrize(
    ("numbers", "target", "solvable"),
    [
        ([2, 3, 7], 13, True),
        ([1, 3, 4, 6], 24, True),
        ([1, 1, 1], 100, False),
        ([5], 5, True),
        ([5], 6, False),
        ([3, 3, 8, 8], 24, True),
        ([1, 5, 5, 5], 24, True),
        ([1, 1, 1, 1], 5, False),
    ],
)
def test_solver(numbers: list[int], target: int, solvable: bool) -> None:
    solution = solve(numbers, target)
    assert (solution is not None) == solvable
    if solution is not None:
        score = compute_score(
            "x", f"<answer>{solution}</answer>", {"target": target, "numbers": numbers}
        )
        assert score["score"] == 1.0, solution


def test_solver_agrees_with_generator() -> None:
    rng = random.Random(0)
    for task in generate_puzzles(200, GeneratorSpec(seed=5)):
        assert solve(task.numbers, task.target) is not None
        # a random target is solvable exactly when the solver says so (checked via the reward)
        target = rng.randint(1, 500)
        found = solve(task.numbers, target)
        if found:
            gt = {"target": target, "numbers": list(task.numbers)}
            assert compute_score("x", f"<answer>{found}</answer>", gt)["score"] == 1.0


def _tasks(n: int) -> list[Puzzle]:
    return [Puzzle((i % 7 + 1, i % 5 + 2, 3), i % 11, "", i) for i in range(n)]


def test_split_policy() -> None:
    tasks = _tasks(200)
    report = split_puzzles(tasks, test_size=20, train_size=None, seed=1)
    assert report.test == tasks[:20]  # first rows, in order
    test_keys = {t.key for t in report.test}
    assert not any(t.key in test_keys for t in report.train)
    assert report.dropped_overlap == 180 - len(report.train)
    assert report.dropped_overlap > 0
    again = split_puzzles(tasks, test_size=20, train_size=None, seed=1)
    assert again.train == report.train
    assert split_puzzles(tasks, test_size=20, train_size=None, seed=2).train != report.train
    assert len(split_puzzles(tasks, 20, train_size=5, seed=1).train) == 5


def test_split_errors() -> None:
    with pytest.raises(DataPrepError, match="not enough"):
        split_puzzles(_tasks(5), test_size=5, train_size=None, seed=0)


@pytest.mark.parametrize("template", countdown.TEMPLATES)
def test_generate_prepare_writes_verl_rows(tmp_path: Path, template: str) -> None:
    result = prepare(
        "generate", str(tmp_path / "cd"), template=template, train_size=300, test_size=50, seed=3
    )
    train = pd.read_parquet(result.paths["train"])
    test = pd.read_parquet(result.paths["test"])
    assert (len(train), len(test)) == (300, 50)
    assert set(train.columns) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    for frame in (train, test):
        for _, row in frame.iterrows():
            gt = row["reward_model"]["ground_truth"]  # numpy after the Parquet round trip
            solution = row["extra_info"]["solution"]
            assert (
                compute_score(row["data_source"], f"<answer>{solution}</answer>", gt)["score"]
                == 1.0
            )
            user = row["prompt"][-1]["content"]
            assert "<answer>" in user and str(gt["target"]) in user
    if template == "chat":
        assert train.iloc[0]["prompt"][0]["role"] == "system"
    if template == "fewshot":
        assert "A: <answer>(2 * 3) + 7</answer>" in train.iloc[0]["prompt"][-1]["content"]


def _write_source(path: Path, rows: list[dict]) -> Path:
    frame = pd.DataFrame(rows)
    if path.suffix == ".parquet":
        frame.to_parquet(path)
    elif path.suffix == ".csv":
        frame.assign(nums=frame["nums"].map(json.dumps)).to_csv(path, index=False)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


HUB_LIKE = [
    {"target": 13, "nums": [2, 3, 7]},
    {"target": 24, "nums": [1, 3, 4, 6]},
    {"target": 100, "nums": [1, 1, 1]},
    {"target": 10, "nums": [2, 5]},
    {"target": 13, "nums": [7, 3, 2]},
    {"target": 9, "nums": [3, 3]},
]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".csv"])
def test_local_file_sources(tmp_path: Path, suffix: str) -> None:
    source = _write_source(tmp_path / f"tasks{suffix}", HUB_LIKE)
    result = prepare(str(source), str(tmp_path / "out"), test_size=1, seed=0, require_solvable=True)
    # [1,1,1]->100 is unsolvable; [7,3,2]->13 duplicates the test task [2,3,7]->13
    assert result.dropped["unsolvable"] == 1
    assert result.dropped["overlap"] == 1
    assert result.counts["train"] == 3
    train = pd.read_parquet(result.paths["train"])
    for _, row in train.iterrows():
        answer = f"<answer>{row['extra_info']['solution']}</answer>"
        assert compute_score("x", answer, row["reward_model"]["ground_truth"])["score"] == 1.0


def test_local_dataset_folder(tmp_path: Path) -> None:
    import datasets

    datasets.Dataset.from_list(HUB_LIKE).save_to_disk(str(tmp_path / "saved"))
    result = prepare(str(tmp_path / "saved"), str(tmp_path / "out"), test_size=2, seed=0)
    assert result.counts["test"] == 2


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([{"target": 1, "numbers": [1]}], r"missing column\(s\) \['nums'\]"),
        ([{"target": "x", "nums": [1]}], r"row 0, field 'target'"),
        ([{"target": 1, "nums": [1]}, {"target": 2, "nums": [1.5, 2]}], r"row 1, field 'nums'"),
        ([{"target": 1, "nums": []}], r"row 0, field 'nums': empty"),
    ],
)
def test_bad_rows_name_the_row_and_field(tmp_path: Path, rows: list, match: str) -> None:
    source = _write_source(tmp_path / "bad.jsonl", rows)
    out = tmp_path / "out"
    with pytest.raises(DataPrepError, match=match):
        prepare(str(source), str(out), test_size=1)
    assert not out.exists()


def test_empty_and_missing_sources(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataPrepError, match="empty"):
        prepare(str(tmp_path / "empty.jsonl"), str(tmp_path / "o"))
    with pytest.raises(DataPrepError, match="no such file"):
        prepare(str(tmp_path / "missing.parquet"), str(tmp_path / "o"))
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(DataPrepError, match="unsupported file type"):
        prepare(str(tmp_path / "x.txt"), str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()


# --- bounds shared with the reward, and the solver's cap ------------------------------------------

LIMIT = countdown_reward.MAX_MAGNITUDE


@pytest.mark.parametrize(
    ("numbers", "target", "gradable"),
    [
        ([LIMIT - 1, 1], LIMIT - 1, True),
        ([1, 2], -(LIMIT - 1), True),
        ([1] * countdown_reward.MAX_NUMBERS, 3, True),
        ([LIMIT, 1], 3, False),
        ([2, 1], LIMIT, False),
        ([2, 1], -LIMIT, False),
        ([1] * (countdown_reward.MAX_NUMBERS + 1), 3, False),
        ([-1, 4], 3, False),
    ],
)
def test_file_tasks_pass_prep_exactly_when_the_reward_grades_them(
    tmp_path: Path, numbers: list[int], target: int, gradable: bool
) -> None:
    """One definition of the bounds: what prep writes, the reward grades (no bad_ground_truth),
    and what the reward would report as bad, prep refuses, naming the row."""
    rows = [{"nums": [2, 3, 7], "target": 13}, {"nums": numbers, "target": target}]
    rows += [{"nums": [i, 3, 7], "target": i + 10} for i in range(1, 6)]
    source = _write_source(tmp_path / "s.jsonl", rows)
    out = tmp_path / "out"
    truth = {"target": target, "numbers": numbers}
    assert (compute_score("countdown", "<answer>1</answer>", truth)["bad_ground_truth"] == 0) == (
        gradable
    )
    if gradable:
        prepare(str(source), str(out), test_size=2)
        test = pd.read_parquet(out / "test.parquet")
        written = test["reward_model"].iloc[1]["ground_truth"]
        graded = compute_score("countdown", "<answer>1</answer>", written)
        assert graded["bad_ground_truth"] == 0.0
    else:
        with pytest.raises(DataPrepError, match=r"row 1[:,] .*remove the row"):
            prepare(str(source), str(out), test_size=2)
        assert not out.exists()


@pytest.mark.parametrize(
    ("spec", "flag"),
    [
        (dict(max_number=LIMIT), "--max_number"),
        (dict(max_number=0), "--max_number"),
        (dict(target_range=(1, LIMIT)), "--target_range"),
        (dict(target_range=(-LIMIT, 1)), "--target_range"),
        (dict(num_range=(2, 9)), "--num_range"),
    ],
)
def test_generator_flags_beyond_the_reward_are_refused(spec: dict, flag: str) -> None:
    with pytest.raises(DataPrepError, match=flag):
        GeneratorSpec(**spec)
    GeneratorSpec(**{k: v for k, v in GeneratorSpec().__dict__.items() if k in spec})  # control


def test_solver_gives_up_after_its_budget() -> None:
    start = time.perf_counter()
    with pytest.raises(SolverGaveUp, match="1,000 search steps"):
        solve([1] * 9, 997, budget=1000)
    assert time.perf_counter() - start < 1
    assert solve([2, 3, 7], 13, budget=1000) is not None  # control: a small search decides


def test_require_solvable_counts_unverified_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task the solver cannot decide within its budget is dropped and counted, not waited on."""
    rows = [{"nums": [i % 9 + 1, 3, 7], "target": i % 9 + 10} for i in range(10)]
    rows.append({"nums": [2, 3, 5, 7, 11, 13], "target": 999_983})  # 6 numbers, unsolvable
    source = _write_source(tmp_path / "s.jsonl", rows)
    monkeypatch.setattr(countdown, "solve", functools.partial(solve, budget=5_000))
    result = prepare(str(source), str(tmp_path / "out"), test_size=2, require_solvable=True)
    assert result.dropped["unverified"] == 1
    assert any("1 unverified (the solver gave up" in line for line in result.lines)


def test_require_solvable_refuses_tasks_too_big_to_verify(tmp_path: Path) -> None:
    rows = [{"nums": [2, 3, 7], "target": 13}, {"nums": [1] * 9, "target": 997}]
    source = _write_source(tmp_path / "s.jsonl", rows)
    start = time.perf_counter()
    with pytest.raises(DataPrepError, match=r"row 1 has 9 numbers.*at most 6 numbers"):
        prepare(str(source), str(tmp_path / "out"), test_size=1, require_solvable=True)
    assert time.perf_counter() - start < 10 and not (tmp_path / "out").exists()

"""GSM8K data prep: ground truth extraction, splits, bad rows, and the golden check."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rewards.gsm8k import compute_score
from rewards.gsm8k import parse_ground_truth as reward_truth
from rlvr.data.prep import DataPrepError
from rlvr.tasks.gsm8k import ground_truth_from_answer, prepare

ROWS = [
    {
        "question": f"Q{i}: what is {i} * 1,000?",
        "answer": f"{i} * 1000 = {i * 1000}\n#### {i * 1000:,}",
    }
    for i in range(1, 41)
]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("answer", "truth"),
    [
        ("... #### 72", "72"),
        ("#### 1,000", "1000"),
        ("#### -3", "-3"),
        ("#### 0.5 ", "0.5"),
        ("a #### 1 b #### 2", "2"),
    ],
)
def test_ground_truth_from_answer(answer: str, truth: str) -> None:
    assert ground_truth_from_answer(answer, "here") == truth


@pytest.mark.parametrize("answer", ["no marker", "#### ", "#### twelve", None])
def test_bad_answer_names_where(answer: object) -> None:
    with pytest.raises(DataPrepError, match="here"):
        ground_truth_from_answer(answer, "here")


def test_prepare_single_file_with_val(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "gsm.jsonl", ROWS)
    result = prepare(str(source), str(tmp_path / "out"), test_size=5, val_size=5, seed=0)
    assert result.counts == {"train": 30, "test": 5, "val": 5}
    test = pd.read_parquet(result.paths["test"])
    assert list(test["extra_info"].map(lambda e: e["question"])) == [
        r["question"] for r in ROWS[:5]
    ]
    splits = {s: pd.read_parquet(p) for s, p in result.paths.items()}
    questions = [set(f["extra_info"].map(lambda e: e["question"])) for f in splits.values()]
    assert not (questions[0] & questions[1]) and not (questions[0] & questions[2])
    for frame in splits.values():
        for _, row in frame.iterrows():
            # golden check: the dataset's own final line scores 1.0
            final = "#### " + row["extra_info"]["answer"].rsplit("####", 1)[1].strip()
            assert (
                compute_score(row["data_source"], final, row["reward_model"]["ground_truth"])[
                    "score"
                ]
                == 1.0
            )
            assert '"####"' in row["prompt"][-1]["content"]


def test_prepare_folder_with_splits(tmp_path: Path) -> None:
    folder = tmp_path / "gsm"
    folder.mkdir()
    pd.DataFrame(ROWS[:30]).to_parquet(folder / "train.parquet")
    pd.DataFrame(ROWS[30:]).to_parquet(folder / "test.parquet")
    result = prepare(str(folder), str(tmp_path / "out"), template="think")
    assert result.counts == {"train": 30, "test": 10}
    row = pd.read_parquet(result.paths["train"]).iloc[0]
    assert "<think>" in row["prompt"][-1]["content"]


def test_bad_row_fails_or_is_skipped(tmp_path: Path) -> None:
    rows = [*ROWS[:10], {"question": "q", "answer": "no final answer"}]
    source = _jsonl(tmp_path / "gsm.jsonl", rows)
    with pytest.raises(DataPrepError, match=r"row 10, field 'answer'"):
        prepare(str(source), str(tmp_path / "out"), test_size=2)
    assert not (tmp_path / "out").exists()
    result = prepare(str(source), str(tmp_path / "out"), test_size=2, skip_bad_rows=True)
    assert result.dropped == {"overlap": 0, "unparsable": 1} and result.counts["train"] == 8


def test_missing_columns_and_test_split(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "gsm.jsonl", [{"q": "x", "answer": "#### 1"}])
    with pytest.raises(DataPrepError, match=r"missing column\(s\) \['question'\]"):
        prepare(str(source), str(tmp_path / "out"), test_size=1)
    ok = _jsonl(tmp_path / "ok.jsonl", ROWS)
    with pytest.raises(DataPrepError, match="--test_size"):
        prepare(str(ok), str(tmp_path / "out"))


# --- one parser with the reward, bad rows, overlap, stale outputs -------------------------------

FINALS = [
    "72",
    "1,000",
    "-3",
    "0.5",
    "3.50",
    "$5",
    "-$1,234.5",
    "$ -7",
    "72.",
    ".25",
    " 1,000,000 ",
    "1,2,14",
    "1e99999999",
    "1e3",
    "12 apples",
    "twelve",
    "",
    "1,00",
    "--5",
    "0x10",
    "1/2",
    "nan",
    "1" * 40,
]


@pytest.mark.parametrize("final", FINALS)
def test_prep_and_reward_read_every_final_answer_alike(final: str) -> None:
    """Prep refuses exactly what the reward cannot read as a ground truth; what it writes, the
    reward grades as the same number, and a response that copies the dataset's line scores 1."""
    answer = f"Work.\n#### {final}"
    read_by_reward = reward_truth(final)
    try:
        written = ground_truth_from_answer(answer, "here")
    except DataPrepError as exc:
        assert read_by_reward is None, f"prep refused what the reward reads: {exc}"
        assert compute_score("openai/gsm8k", "#### 1", final)["bad_ground_truth"] == 1.0
        return
    assert read_by_reward is not None and reward_truth(written) == read_by_reward
    assert compute_score("openai/gsm8k", answer, written)["score"] == 1.0


def test_prep_refuses_what_used_to_slip_through() -> None:
    for final in ("1,2,14", "1e99999999"):  # became 1214; each reward call took seconds
        with pytest.raises(DataPrepError, match="not a number as the reward reads it"):
            ground_truth_from_answer(f"#### {final}", "here")


@pytest.mark.parametrize("question", [None, "", "   "])
def test_a_row_without_a_question_is_refused_or_skipped(tmp_path: Path, question: object) -> None:
    rows = [*ROWS[:10], {"question": question, "answer": "#### 3"}]
    source = _jsonl(tmp_path / "gsm.jsonl", rows)
    with pytest.raises(DataPrepError, match=r"row 10, field 'question'.*--skip_bad_rows"):
        prepare(str(source), str(tmp_path / "out"), test_size=2)
    assert not (tmp_path / "out").exists()
    result = prepare(str(source), str(tmp_path / "out"), test_size=2, skip_bad_rows=True)
    assert result.dropped["unparsable"] == 1
    prompts = pd.read_parquet(result.paths["train"])["prompt"]
    assert not any(str(p[-1]["content"]).startswith(("None", " ")) for p in prompts)


def test_train_questions_also_in_test_are_dropped(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    _jsonl(folder / "train.jsonl", [*ROWS[:20], {**ROWS[30], "question": "  q31: WHAT is 31 "}])
    _jsonl(folder / "test.jsonl", [ROWS[3], {**ROWS[30], "question": "Q31: what is 31"}])
    result = prepare(str(folder), str(tmp_path / "out"))
    assert result.dropped["overlap"] == 2 and result.counts["train"] == 19
    train = pd.read_parquet(result.paths["train"])["extra_info"].map(lambda e: e["question"])
    assert ROWS[3]["question"] not in set(train)
    assert any("2 train rows whose question is also in test" in line for line in result.lines)


def test_a_rerun_without_val_size_leaves_no_stale_val(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "gsm.jsonl", ROWS)
    out = tmp_path / "out"
    prepare(str(source), str(out), test_size=5, val_size=5)
    assert (out / "val.parquet").exists()
    prepare(str(source), str(out), test_size=5)
    assert sorted(p.name for p in out.iterdir()) == ["test.parquet", "train.parquet"]


def test_val_size_that_leaves_no_train_names_the_flag(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "gsm.jsonl", ROWS)
    with pytest.raises(DataPrepError, match=r"--val_size 35: the train split has 35 rows"):
        prepare(str(source), str(tmp_path / "out"), test_size=5, val_size=35)
    prepare(str(source), str(tmp_path / "out"), test_size=5, val_size=34)  # control

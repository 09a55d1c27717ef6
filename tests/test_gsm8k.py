"""GSM8K data prep: ground truth extraction, splits, bad rows, and the golden check."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from rewards.gsm8k import compute_score
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
    assert result.dropped == {"unparsable": 1} and result.counts["train"] == 8


def test_missing_columns_and_test_split(tmp_path: Path) -> None:
    source = _jsonl(tmp_path / "gsm.jsonl", [{"q": "x", "answer": "#### 1"}])
    with pytest.raises(DataPrepError, match=r"missing column\(s\) \['question'\]"):
        prepare(str(source), str(tmp_path / "out"), test_size=1)
    ok = _jsonl(tmp_path / "ok.jsonl", ROWS)
    with pytest.raises(DataPrepError, match="--test_size"):
        prepare(str(ok), str(tmp_path / "out"))

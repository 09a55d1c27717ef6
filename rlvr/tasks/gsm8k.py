"""GSM8K data: ground-truth extraction, prompt templates and verl-schema rows.

The instruction text comes from ``rewards.gsm8k`` (the contract the reward grades).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from rewards import gsm8k as contract
from rlvr.data.prep import DataPrepError, chat_prompt, require_columns

DATA_SOURCE = "openai/gsm8k"
HUB_DATASET = "openai/gsm8k"
HUB_CONFIG = "main"
TEMPLATES = ("chat", "think")


def ground_truth_from_answer(answer: str, where: str) -> str:
    """The number after ``####`` in a GSM8K answer, commas removed ("1,000" -> "1000")."""
    if not isinstance(answer, str) or contract.ANSWER_MARKER not in answer:
        raise DataPrepError(f"{where}: no '####' final answer in {str(answer)[-80:]!r}")
    final = answer.rsplit(contract.ANSWER_MARKER, 1)[1].strip().replace(",", "")
    if contract.parse_ground_truth(final) is None:
        raise DataPrepError(f"{where}: final answer {final!r} is not a number")
    return final


def build_prompt(question: str, template: str) -> list[dict[str, str]]:
    if template == "chat":
        return chat_prompt(f"{question} {contract.INSTRUCTION}")
    if template == "think":
        return chat_prompt(f"{question} {contract.THINK_INSTRUCTION}")
    raise DataPrepError(f"--template {template!r}: choose one of {TEMPLATES}")


def to_row(
    question: str, answer: str, truth: str, split: str, index: int, template: str
) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": build_prompt(question, template),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {
            "split": split,
            "index": index,
            "question": question,
            "answer": answer,
            "template": template,
        },
    }


@dataclass
class PrepResult:
    paths: dict[str, Any]
    counts: dict[str, int]
    skipped: int
    example: dict[str, Any]

    def summary_lines(self) -> list[str]:
        lines = [f"{split}: {n} rows -> {self.paths[split]}" for split, n in self.counts.items()]
        lines.append(f"skipped: {self.skipped} rows without a parsable final answer")
        return lines


def _rows(dataset: Any, split: str, where: str, template: str, skip_bad: bool) -> tuple[list, int]:
    require_columns(dataset, ["question", "answer"], where)
    rows, skipped = [], 0
    for index, item in enumerate(dataset):
        try:
            truth = ground_truth_from_answer(
                item["answer"], f"{where}: row {index}, field 'answer'"
            )
        except DataPrepError:
            if not skip_bad:
                raise
            skipped += 1
            continue
        rows.append((item["question"], item["answer"], truth))
    return rows, skipped


def prepare(
    source: str,
    local_dir: str,
    *,
    template: str = "chat",
    train_size: int | None = None,
    test_size: int | None = None,
    val_size: int = 0,
    seed: int = 42,
    skip_bad_rows: bool = False,
) -> PrepResult:
    """Write ``train.parquet``, ``test.parquet`` (and ``val.parquet`` with ``val_size``)."""
    from rlvr.data.prep import load_source, write_splits

    if template not in TEMPLATES:
        raise DataPrepError(f"--template {template!r}: choose one of {TEMPLATES}")
    splits = load_source(source, HUB_DATASET, HUB_CONFIG)
    where = HUB_DATASET if source == "hf" else source
    if "train" not in splits:
        raise DataPrepError(f"{where}: no 'train' split (found {sorted(splits)})")
    train, skipped = _rows(splits["train"], "train", f"{where} [train]", template, skip_bad_rows)
    if "test" in splits:
        test, skipped_test = _rows(
            splits["test"], "test", f"{where} [test]", template, skip_bad_rows
        )
        skipped += skipped_test
    elif test_size:
        test, train = train[:test_size], train[test_size:]  # the seed's policy: first rows
    else:
        raise DataPrepError(
            f"{where}: no 'test' split; pass --test_size N to take the first N rows"
        )
    if test_size:
        test = test[:test_size]
    random.Random(seed).shuffle(train)
    if val_size < 0:
        raise DataPrepError("--val_size must be >= 0")
    val, train = train[:val_size], train[val_size:]
    if train_size is not None:
        train = train[:train_size]
    out = {"train": train, "test": test} | ({"val": val} if val_size else {})
    rows = {
        split: [to_row(q, a, t, split, i, template) for i, (q, a, t) in enumerate(items)]
        for split, items in out.items()
    }
    paths = write_splits(local_dir, rows)
    return PrepResult(paths, {s: len(r) for s, r in rows.items()}, skipped, rows["train"][0])

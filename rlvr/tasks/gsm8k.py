"""The GSM8K task: ground-truth extraction, prompt templates, verl-schema rows, prep, spec.

The instruction text comes from ``rewards.gsm8k`` (the contract the reward grades).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

from rewards import gsm8k as contract
from rlvr.data.prep import (
    DataPrepError,
    PrepResult,
    add_split_arguments,
    chat_prompt,
    load_source,
    require_columns,
    row_count,
    split_options,
    write_splits,
)
from rlvr.tasks.spec import TaskSpec

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
    local_dir: str | Path,
    *,
    template: str = "chat",
    train_size: int | None = None,
    test_size: int | None = None,
    val_size: int = 0,
    seed: int = 42,
    skip_bad_rows: bool = False,
) -> PrepResult:
    """Write ``train.parquet``, ``test.parquet`` (and ``val.parquet`` with ``val_size``)."""
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
    lines = [f"{split}: {len(r)} rows -> {paths[split]}" for split, r in rows.items()]
    lines.append(f"skipped: {skipped} rows without a parsable final answer")
    counts = {split: len(r) for split, r in rows.items()}
    return PrepResult(paths, counts, {"unparsable": skipped}, rows["train"][0], lines)


# --- the command line and the spec ---------------------------------------------------------------


def add_prep_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--source", default="hf", help="hf, or a local file/folder path")
    add(
        "--template",
        default="chat",
        choices=TEMPLATES,
        help="chat: step by step, answer after ####; think: reason in <think> first",
    )
    add_split_arguments(
        parser,
        test_default=None,
        train_help="cap on train rows",
        test_help="cap on test rows; with a source that has no test split, the first N rows",
    )
    add("--val_size", type=row_count, default=0, help="validation rows carved out of train")
    add(
        "--skip_bad_rows",
        action="store_true",
        help="skip rows whose answer has no parsable number (and count them) instead of failing",
    )


def prepare_from_args(args: argparse.Namespace) -> PrepResult:
    return prepare(
        args.source,
        args.local_dir,
        template=args.template,
        val_size=args.val_size,
        skip_bad_rows=args.skip_bad_rows,
        **split_options(args),
    )


def offline_data(out: Path, train_rows: int, val_rows: int) -> None:
    """GSM8K-format word problems (question, worked answer ending in '#### N'), prepared into
    train/val/test Parquet under ``out`` (the source files go to a sibling folder)."""
    source = out.parent / f"{out.name}_source"
    source.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", train_rows + val_rows), ("test", val_rows)):
        lines = []
        for i in range(count):
            a, b = 3 + i % 17, 5 + i % 11
            question = f"Sam has {a} apples and buys {b} more. How many apples does Sam have?"
            answer = f"Sam has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"
            lines.append(json.dumps({"question": question, "answer": answer}))
        (source / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    prepare(str(source), out, val_size=val_rows)


SPEC = TaskSpec.from_module(
    sys.modules[__name__],
    summary="GSM8K: grade-school word problems, graded on the final number.",
    default_experiment="gsm8k_qwen2_5_3b",
    prep_flags=" --val_size 500",
)

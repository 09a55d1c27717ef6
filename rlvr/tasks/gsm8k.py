"""The GSM8K task: ground-truth extraction, prompt templates, verl-schema rows, prep, spec.

The instruction text comes from ``rewards.gsm8k`` (the contract the reward grades).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

from rewards import gsm8k as contract
from rlvr.common.paths import ROOT
from rlvr.data.prep import (
    DataPrepError,
    PrepResult,
    add_split_arguments,
    chat_prompt,
    check_destination,
    load_source,
    require_columns,
    row_count,
    split_options,
    write_splits,
)
from rlvr.tasks.spec import HackingPattern, TaskSpec

DATA_SOURCE = "openai/gsm8k"
HUB_DATASET = "openai/gsm8k"
HUB_CONFIG = "main"
TEMPLATES = ("chat", "think")


def ground_truth_from_answer(answer: str, where: str) -> str:
    """The number after the last ``####`` in a GSM8K answer, as plain digits ("1,000" -> "1000").

    It is read by the reward's own ``parse_ground_truth`` (one parser): what the reward would
    not read as a number (``1,2,14``, ``1e99999999``, ``12 apples``) is refused here.
    """
    if not isinstance(answer, str) or contract.ANSWER_MARKER not in answer:
        raise DataPrepError(f"{where}: no '####' final answer in {str(answer)[-80:]!r}")
    final = answer.rsplit(contract.ANSWER_MARKER, 1)[1].strip()
    value = contract.parse_ground_truth(final)
    if value is None:
        raise DataPrepError(
            f"{where}: final answer {final[:40]!r} is not a number as the reward reads it "
            "(digits, optional sign, $ and decimals, commas only between groups of three)"
        )
    return canonical_number(value)


def canonical_number(value: Fraction) -> str:
    """A decimal-text Fraction as plain decimal digits: 1000, -3, 0.5."""
    if value.denominator == 1:
        return str(value.numerator)
    places = next((k for k in range(1, 64) if 10**k % value.denominator == 0), None)
    if places is None:  # not a decimal fraction; the parser never returns one from text
        raise ValueError(f"{value} has no finite decimal form")
    digits = str(abs(value.numerator) * 10**places // value.denominator).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[:-places]}.{digits[-places:]}".rstrip("0")


def question_key(question: str) -> str:
    """Identity for the train/test overlap check: the words, case and spacing ignored."""
    return " ".join(question.split()).casefold()


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


def _row(item: Any, at: str) -> tuple[str, str, str]:
    question = item["question"]
    if not isinstance(question, str) or not question.strip():
        raise DataPrepError(f"{at}, field 'question': {question!r} is not a question")
    truth = ground_truth_from_answer(item["answer"], f"{at}, field 'answer'")
    return question, item["answer"], truth


def _rows(dataset: Any, where: str, skip_bad: bool) -> tuple[list[tuple[str, str, str]], int]:
    require_columns(dataset, ["question", "answer"], where)
    rows, skipped = [], 0
    for index, item in enumerate(dataset):
        try:
            rows.append(_row(item, f"{where}: row {index}"))
        except DataPrepError as exc:
            if not skip_bad:
                raise DataPrepError(f"{exc}; fix the row or pass --skip_bad_rows") from None
            skipped += 1
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
    _check_sizes(train_size, test_size, val_size)
    check_destination(local_dir)  # before any work: a folder that is not ours is refused
    splits = load_source(source, HUB_DATASET, HUB_CONFIG)
    where = HUB_DATASET if source == "hf" else source
    if "train" not in splits:
        raise DataPrepError(f"{where}: no 'train' split (found {sorted(splits)})")
    train, skipped = _rows(splits["train"], f"{where} [train]", skip_bad_rows)
    if "test" in splits:
        test, skipped_test = _rows(splits["test"], f"{where} [test]", skip_bad_rows)
        skipped += skipped_test
    elif test_size:
        test, train = train[:test_size], train[test_size:]  # TuFT guide's split policy: first rows
    else:
        raise DataPrepError(
            f"{where}: no 'test' split; pass --test_size N to take the first N rows"
        )
    if test_size:
        test = test[:test_size]
    # A question in both splits would be graded on test after training on it: drop it from train.
    test_keys = {question_key(q) for q, _, _ in test}
    kept = [row for row in train if question_key(row[0]) not in test_keys]
    overlap, train = len(train) - len(kept), kept
    random.Random(seed).shuffle(train)
    if val_size and val_size >= len(train):
        raise DataPrepError(
            f"--val_size {val_size}: the train split has {len(train)} rows, so none would be "
            "left for training; lower --val_size"
        )
    val, train = train[:val_size], train[val_size:]
    if train_size is not None:
        train = train[:train_size]
    out = {"train": train, "test": test} | ({"val": val} if val_size else {})
    rows = {
        split: [to_row(q, a, t, split, i, template) for i, (q, a, t) in enumerate(items)]
        for split, items in out.items()
    }
    paths = write_splits(local_dir, rows)  # replaces the folder whole: no stale val.parquet
    lines = [f"{split}: {len(r)} rows -> {paths[split]}" for split, r in rows.items()]
    lines.append(
        f"dropped: {overlap} train rows whose question is also in test, {skipped} bad rows "
        "skipped (no question, or no final answer the reward reads)"
    )
    counts = {split: len(r) for split, r in rows.items()}
    dropped = {"overlap": overlap, "unparsable": skipped}
    return PrepResult(paths, counts, dropped, rows["train"][0], lines)


def _check_sizes(train_size: int | None, test_size: int | None, val_size: int) -> None:
    """The CLI's own types check these; ``prepare`` called directly gets the same messages."""
    if train_size is not None and train_size < 1:
        raise DataPrepError("--train_size must be at least 1 (omit it to keep every train row)")
    if test_size is not None and test_size < 1:
        raise DataPrepError("--test_size must be at least 1 (omit it to keep the whole test split)")
    if val_size < 0:
        raise DataPrepError("--val_size must be >= 0")


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
        help="skip bad rows (no question, or no final answer the reward reads) and count them, "
        "instead of failing",
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
    for split, first, count in (("train", 0, train_rows + val_rows), ("test", 10**6, val_rows)):
        lines = []
        for i in range(first, first + count):  # distinct numbers: no test question is in train
            a, b = 3 + i, 5 + i % 11
            question = f"Sam has {a} apples and buys {b} more. How many apples does Sam have?"
            answer = f"Sam has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"
            lines.append(json.dumps({"question": question, "answer": answer}))
        (source / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    prepare(str(source), out, val_size=val_rows)


# --- reward hacking: rewarded responses that break the contract's spirit (scripts/report.py) ------

_NUMBER_IN_TEXT = re.compile(r"-?\$?\s*(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
#: Even a one-step problem takes a sentence ("3 + 5 = 8 apples in all"); under five words before
#: the final answer is a bare number, not reasoning.
MIN_REASONING_WORDS = 5
#: A unit or a closing sentence after the answer is harmless; 40+ more characters is a second text.
TRAILING_TEXT_CHARS = 40


def _value(number: str) -> Fraction:
    return Fraction(number.replace("$", "").replace(",", "").replace(" ", ""))


def _final_values(response: str) -> set[Fraction]:
    """Every number on a ``####`` line or in a ``\\boxed{}``: what a reader takes as final."""
    lines = [part.split("\n", 1)[0] for part in response.split(contract.ANSWER_MARKER)[1:]]
    lines += _BOXED.findall(response)
    return {_value(number) for line in lines for number in _NUMBER_IN_TEXT.findall(line)}


def _several_final_numbers(prompt: str, response: str) -> bool:
    """Different final numbers: the reward reads only the last ``####``, the others are hedges."""
    return len(_final_values(response)) > 1


def _no_reasoning(prompt: str, response: str) -> bool:
    marker = response.rfind(contract.ANSWER_MARKER)
    return marker >= 0 and len(response[:marker].split()) < MIN_REASONING_WORDS


def _text_after_answer(prompt: str, response: str) -> bool:
    marker = response.rfind(contract.ANSWER_MARKER)
    if marker < 0:
        return False
    tail = response[marker + len(contract.ANSWER_MARKER) :]
    number = _NUMBER_IN_TEXT.search(tail)
    after = tail[number.end() :] if number else tail
    return len("".join(after.split())) > TRAILING_TEXT_CHARS


HACKING_PATTERNS = (
    HackingPattern(
        "several_final_numbers",
        "different numbers after #### markers or in \\boxed{}",
        _several_final_numbers,
    ),
    HackingPattern(
        "no_reasoning",
        f"under {MIN_REASONING_WORDS} words before the final ####",
        _no_reasoning,
    ),
    HackingPattern(
        "text_after_answer",
        f"over {TRAILING_TEXT_CHARS} characters after the final answer",
        _text_after_answer,
    ),
)


SPEC = TaskSpec(
    name="gsm8k",  # its overlay configs/task/gsm8k.yaml and its data folder
    data_source=DATA_SOURCE,
    reward_file=ROOT / "rewards" / "gsm8k.py",  # the prompt contract and its grader
    summary="GSM8K: grade-school word problems, graded on the final number.",
    add_prep_arguments=add_prep_arguments,
    prepare=prepare_from_args,
    offline_data=offline_data,
    default_experiment="gsm8k_qwen2_5_3b",
    prep_flags=" --val_size 500",
    hacking_patterns=HACKING_PATTERNS,
)

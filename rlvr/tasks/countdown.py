"""The Countdown task: prompt templates, verl-schema rows, data prep and its spec.

The prompt text comes from ``rewards.countdown`` (the contract the reward grades), so a prompt
and its grader cannot drift apart; the puzzles themselves are in ``countdown_puzzles``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from rewards import countdown as contract
from rlvr.common.paths import ROOT
from rlvr.data.prep import (
    DataPrepError,
    PrepResult,
    add_split_arguments,
    chat_prompt,
    check_destination,
    load_source,
    sft_columns,
    split_options,
    write_splits,
)
from rlvr.tasks.countdown_puzzles import (
    MAX_SOLVE_NUMBERS,
    SOLVER_BUDGET,
    GeneratorSpec,
    Puzzle,
    SolverGaveUp,
    SplitReport,
    generate_puzzles,
    numbers_histogram,
    puzzles_from_dataset,
    solve,
    split_puzzles,
)
from rlvr.tasks.spec import HackingPattern, TaskSpec

DATA_SOURCE = "countdown"
HUB_DATASET = "Jiayi-Pan/Countdown-Tasks-3to4"
TEMPLATES = ("chat", "plain", "compact", "think", "fewshot")
#: Most tasks one run generates (about 90 s on 2 cores); a typo'd size fails at once.
MAX_GENERATED = 1_000_000
SYSTEM_PROMPT = (
    "You are a helpful assistant. You solve arithmetic puzzles carefully and always give the "
    "final answer in the requested format."
)


def build_prompt(puzzle: Puzzle, template: str) -> list[dict[str, str]]:
    text = contract.task_text(puzzle.numbers, puzzle.target)
    if template == "chat":
        return chat_prompt(text, SYSTEM_PROMPT)
    if template == "plain":
        return chat_prompt(text)
    if template == "compact":
        return chat_prompt(contract.compact_task_text(puzzle.numbers, puzzle.target))
    if template == "think":
        return chat_prompt(f"{text} {contract.THINK_INSTRUCTION}")
    if template == "fewshot":
        return chat_prompt(f"{contract.FEWSHOT_EXAMPLE}\n\nQ: {text}\nA:")
    raise DataPrepError(f"--template {template!r}: choose one of {TEMPLATES}")


def sft_response(puzzle: Puzzle) -> str:
    """The SFT target: the puzzle's known solution in the contract's answer format."""
    if not puzzle.solution:
        raise DataPrepError(
            f"--sft: task {puzzle.source_index} has no known solution; generate tasks or pass "
            "--require_solvable"
        )
    return f"{contract.ANSWER_OPEN}{puzzle.solution}{contract.ANSWER_CLOSE}"


def to_row(
    puzzle: Puzzle, split: str, index: int, template: str, source: str, sft: bool = False
) -> dict[str, Any]:
    """One verl RLHFDataset row; ``reward_model.ground_truth`` is what the reward reads. With
    ``sft``, also the columns verl's SFTDataset reads (``rlvr.data.prep.sft_columns``)."""
    numbers = [int(n) for n in puzzle.numbers]
    prompt = build_prompt(puzzle, template)
    extra = sft_columns(prompt, sft_response(puzzle), f"--template {template}") if sft else {}
    return {
        **extra,
        "data_source": DATA_SOURCE,
        "prompt": prompt,
        "ability": "math",
        "reward_model": {
            "style": "rule",
            "ground_truth": {"target": int(puzzle.target), "numbers": numbers},
        },
        "extra_info": {
            "split": split,
            "index": index,
            "source": source,
            "source_index": int(puzzle.source_index),
            "nums": numbers,
            "target": int(puzzle.target),
            "solution": puzzle.solution,
            "template": template,
        },
    }


def summary_lines(report: SplitReport, paths: dict[str, Path]) -> list[str]:
    every = report.train + report.test
    targets = [p.target for p in every]
    histogram_text = ", ".join(f"{k}: {v}" for k, v in numbers_histogram(every).items())
    unverified = (
        f", {report.dropped_unverified} unverified (the solver gave up after "
        f"{SOLVER_BUDGET:,} steps each)"
        if report.dropped_unverified
        else ""
    )
    return [
        f"train: {len(report.train)} rows -> {paths['train']}",
        f"test: {len(report.test)} rows -> {paths['test']}",
        f"dropped: {report.dropped_overlap} train rows also in test, "
        f"{report.dropped_unsolvable} unsolvable{unverified}",
        f"stats: numbers per task {{{histogram_text}}}, "
        f"target range [{min(targets)}, {max(targets)}]",
    ]


def _load_puzzles(
    source: str, dataset: str, count: int, generator: GeneratorSpec
) -> tuple[list[Puzzle], str]:
    from tqdm import tqdm

    if source == "generate":
        with tqdm(total=count, desc="generating", unit="task", disable=count < 5000) as bar:
            return generate_puzzles(count, generator, bar), f"generate(seed={generator.seed})"
    splits = load_source(source, dataset)
    where = dataset if source == "hf" else source
    if "train" not in splits:
        raise DataPrepError(f"{where}: no 'train' split (found {sorted(splits)})")
    return puzzles_from_dataset(splits["train"], where), where


def _solvable(puzzles: list[Puzzle], where: str) -> tuple[list[Puzzle], int, int]:
    """The puzzles with a solution (found or known), and the counts dropped as unsolvable and as
    unverified (the solver's step budget ran out)."""
    from tqdm import tqdm

    unsolved = [p for p in puzzles if not p.solution]
    too_big = next((p for p in unsolved if len(p.numbers) > MAX_SOLVE_NUMBERS), None)
    if too_big is not None:  # refused up front: such searches take minutes to hours each
        raise DataPrepError(
            f"--require_solvable: {where} row {too_big.source_index} has {len(too_big.numbers)} "
            f"numbers; the solver verifies tasks of at most {MAX_SOLVE_NUMBERS} numbers (its work "
            "grows exponentially); drop the flag or remove the larger tasks"
        )
    kept, unverified = [], 0
    for puzzle in tqdm(puzzles, desc="solving", unit="task", disable=len(unsolved) < 2000):
        try:
            solution = puzzle.solution or solve(puzzle.numbers, puzzle.target)
        except SolverGaveUp:
            unverified += 1
            continue
        if solution is not None:
            kept.append(Puzzle(puzzle.numbers, puzzle.target, solution, puzzle.source_index))
    return kept, len(puzzles) - len(kept) - unverified, unverified


def prepare(
    source: str,
    local_dir: str | Path,
    *,
    dataset: str = HUB_DATASET,
    template: str = "chat",
    train_size: int | None = None,
    test_size: int = 1024,
    seed: int = 42,
    generator: GeneratorSpec | None = None,
    require_solvable: bool = False,
    generated_train_default: int = 10_000,
    sft: bool = False,
) -> PrepResult:
    """Load or generate puzzles, split them, and write ``train/test.parquet`` atomically."""
    if template not in TEMPLATES:
        raise DataPrepError(f"--template {template!r}: choose one of {TEMPLATES}")
    check_destination(local_dir)  # before any work: a folder that is not ours is refused
    count = test_size + (train_size if train_size is not None else generated_train_default)
    if source == "generate" and count > MAX_GENERATED:
        raise DataPrepError(
            f"--train_size + --test_size: {count:,} tasks to generate; one run generates at most "
            f"{MAX_GENERATED:,}; lower them"
        )
    puzzles, source_name = _load_puzzles(
        source, dataset, count, generator or GeneratorSpec(seed=seed)
    )
    dropped_unsolvable = dropped_unverified = 0
    if require_solvable:
        puzzles, dropped_unsolvable, dropped_unverified = _solvable(puzzles, source_name)
    report = split_puzzles(puzzles, test_size, train_size, seed)
    report.dropped_unsolvable = dropped_unsolvable
    report.dropped_unverified = dropped_unverified
    rows = {
        split: [to_row(p, split, i, template, source_name, sft) for i, p in enumerate(chosen)]
        for split, chosen in (("train", report.train), ("test", report.test))
    }
    paths = write_splits(local_dir, rows)
    return PrepResult(
        paths=paths,
        counts={split: len(r) for split, r in rows.items()},
        dropped={
            "overlap": report.dropped_overlap,
            "unsolvable": dropped_unsolvable,
            "unverified": dropped_unverified,
        },
        example=rows["train"][0],
        lines=summary_lines(report, paths),
    )


# --- the command line and the spec ---------------------------------------------------------------


def _int_pair(text: str) -> tuple[int, int]:
    try:
        low, high = (int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected two integers like 3,4") from None
    return low, high


def add_prep_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--source", default="hf", help="hf, generate, or a local file/folder path")
    add("--dataset", default=HUB_DATASET, help="hub dataset name for --source hf")
    add(
        "--template",
        default="chat",
        choices=TEMPLATES,
        help="chat: system+user for instruct models; plain: the task alone as the user message; "
        "compact: the task and its rules in one short sentence (a third fewer prompt tokens, for "
        "small CPU runs); think: reason in <think> first (Qwen3-style); fewshot: a worked "
        "example prepended",
    )
    add_split_arguments(
        parser,
        test_default=1024,
        train_help="cap on train rows (generate: how many to make, default 10000)",
        test_help="test rows: the first N tasks",
    )
    add("--num_range", type=_int_pair, default=(3, 4), help="generate: numbers per task, low,high")
    add("--max_number", type=int, default=99, help="generate: largest number")
    add("--target_range", type=_int_pair, default=(1, 100), help="generate: target low,high")
    add(
        "--require_solvable",
        action="store_true",
        help="hub/file sources: drop tasks with no exact solution, and count them (tasks of up "
        f"to {MAX_SOLVE_NUMBERS} numbers; a search past {SOLVER_BUDGET:,} steps is dropped as "
        "unverified)",
    )
    add(
        "--sft",
        action="store_true",
        help="also write the columns verl's SFT trainer reads (sft_prompt: the prompt as GRPO "
        "renders it; sft_response: the known solution in <answer> tags); a one-message template "
        "(plain, think, fewshot)",
    )


def prepare_from_args(args: argparse.Namespace) -> PrepResult:
    generator = GeneratorSpec(args.num_range, args.max_number, args.target_range, args.seed)
    return prepare(
        args.source,
        args.local_dir,
        dataset=args.dataset,
        template=args.template,
        generator=generator,
        require_solvable=args.require_solvable,
        sft=args.sft,
        **split_options(args),
    )


def offline_data(out: Path, train_rows: int, val_rows: int) -> None:
    """Generated puzzles: train.parquet and test.parquet (the validation split) under ``out``."""
    prepare("generate", out, train_size=train_rows, test_size=val_rows)


# --- reward hacking: rewarded responses that break the contract's spirit (scripts/report.py) ------

_ANSWER = re.compile(
    re.escape(contract.ANSWER_OPEN) + r"(.*?)" + re.escape(contract.ANSWER_CLOSE), re.DOTALL
)
#: An expression over six numbers, each with up to three digits, spaced and parenthesised, is
#: under 50 characters; 80 leaves room and still catches prose or padding inside the tags.
LONG_ANSWER_CHARS = 80
#: A closing period or a short remark after the answer is harmless; a sentence or more is not.
TRAILING_TEXT_CHARS = 20


def _answers(response: str) -> list[str]:
    return _ANSWER.findall(response)


def _squeezed(text: str) -> str:
    return "".join(text.split())


def _copies_example(prompt: str, response: str) -> bool:
    """The graded answer is one the prompt shows as an example (RULES, the few-shot)."""
    answers = _answers(response)
    examples = {_squeezed(example) for example in _answers(prompt)}
    return bool(answers) and _squeezed(answers[-1]) in examples


def _several_answers(prompt: str, response: str) -> bool:
    """More than one answer tag: the reward grades only the last, so several are free tries."""
    return response.count(contract.ANSWER_OPEN) > 1


def _long_answer(prompt: str, response: str) -> bool:
    answers = _answers(response)
    return bool(answers) and len(answers[-1].strip()) > LONG_ANSWER_CHARS


def _no_arithmetic(prompt: str, response: str) -> bool:
    """Tags with no number inside: the format score without any attempt at the puzzle."""
    answers = _answers(response)
    return bool(answers) and not any(ch.isdigit() for ch in answers[-1])


def _text_after_answer(prompt: str, response: str) -> bool:
    end = response.rfind(contract.ANSWER_CLOSE)
    if end < 0:
        return False
    tail = response[end + len(contract.ANSWER_CLOSE) :]
    return len(_squeezed(tail)) > TRAILING_TEXT_CHARS


HACKING_PATTERNS = (
    HackingPattern("copies_example", "the answer is the prompt's own example", _copies_example),
    HackingPattern("several_answers", "more than one <answer> tag", _several_answers),
    HackingPattern(
        "long_answer", f"answer over {LONG_ANSWER_CHARS} characters (prose, padding)", _long_answer
    ),
    HackingPattern("no_arithmetic", "answer tags with no number inside", _no_arithmetic),
    HackingPattern(
        "text_after_answer",
        f"over {TRAILING_TEXT_CHARS} characters of text after the last </answer>",
        _text_after_answer,
    ),
)


SPEC = TaskSpec(
    name="countdown",  # its overlay configs/task/countdown.yaml and its data folder
    data_source=DATA_SOURCE,
    reward_file=ROOT / "rewards" / "countdown.py",  # the prompt contract and its grader
    summary="Countdown: reach a target with + - * / using each given number once.",
    add_prep_arguments=add_prep_arguments,
    prepare=prepare_from_args,
    offline_data=offline_data,
    default_experiment="countdown_qwen3_4b",
    hacking_patterns=HACKING_PATTERNS,
)

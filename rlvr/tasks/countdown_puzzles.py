"""Countdown puzzles: a generator of solvable ones, an exact solver, and the split of TuFT's
Countdown RL guide (github.com/agentscope-ai/TuFT,
docs/sphinx_doc/source/user-guide/countdown-rl.md).

A puzzle is a multiset of numbers and a target; the rules (each number once, + - * /, exact
rational arithmetic) are the reward's, ``rewards/countdown.py``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from rewards.countdown import MAX_MAGNITUDE, MAX_NUMBERS, task_problem
from rlvr.data.prep import DataPrepError, parse_int, parse_int_list, require_columns


@dataclass(frozen=True)
class Puzzle:
    numbers: tuple[int, ...]
    target: int
    solution: str = ""  # an expression that reaches the target, when known
    source_index: int = -1

    @property
    def key(self) -> tuple[tuple[int, ...], int]:
        """Identity for split de-duplication: the numbers as a multiset, and the target."""
        return tuple(sorted(self.numbers)), self.target


# --- generator -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GeneratorSpec:
    num_range: tuple[int, int] = (3, 4)  # how many numbers a task has, inclusive
    max_number: int = 99
    target_range: tuple[int, int] = (1, 100)
    seed: int = 42

    def __post_init__(self) -> None:
        low, high = self.num_range
        if not 2 <= low <= high <= 8:
            raise DataPrepError(f"--num_range {low},{high}: need 2 <= low <= high <= 8")
        # The reward's bounds (rewards/countdown.py): a task outside them could not be graded.
        if not 1 <= self.max_number < MAX_MAGNITUDE:
            raise DataPrepError(
                f"--max_number {self.max_number}: must be from 1 to {MAX_MAGNITUDE - 1:,} "
                "(the largest number the reward grades)"
            )
        t_low, t_high = self.target_range
        if t_low > t_high:
            raise DataPrepError(f"--target_range {t_low},{t_high}: low is above high")
        if max(abs(t_low), abs(t_high)) >= MAX_MAGNITUDE:
            raise DataPrepError(
                f"--target_range {t_low},{t_high}: targets must be within +-{MAX_MAGNITUDE - 1:,} "
                "(the largest target the reward grades)"
            )


def _random_solution(rng: random.Random, numbers: list[int]) -> tuple[int, str]:
    """Combine the numbers with a random binary tree of integer-valued operations.

    Intermediates stay non-negative integers (the classic Countdown rules), which the reward's
    rational grammar also accepts, so every generated solution scores 1.0 by construction.
    """
    items = [(n, str(n)) for n in numbers]
    rng.shuffle(items)
    while len(items) > 1:
        i = rng.randrange(len(items) - 1)
        (a, a_text), (b, b_text) = items[i], items[i + 1]
        if rng.random() < 0.5:
            (a, a_text), (b, b_text) = (b, b_text), (a, a_text)
        ops = ["+", "*"]
        if a > b:
            ops.append("-")
        if b > 1 and a % b == 0:
            ops.append("/")
        op = rng.choice(ops)
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b else 0}[op]
        items[i : i + 2] = [(value, f"({a_text} {op} {b_text})")]
    value, text = items[0]
    return value, text[1:-1] if text.startswith("(") else text


def generate_puzzles(count: int, spec: GeneratorSpec, progress: Any = None) -> list[Puzzle]:
    """``count`` solvable tasks, deterministic for a given spec (its seed included)."""
    rng = random.Random(spec.seed)
    low_t, high_t = spec.target_range
    tasks: list[Puzzle] = []
    for _ in range(count):
        # The size is drawn per task, then kept while retrying, so sizes stay uniform even when
        # larger sets miss the target range more often.
        size = rng.randint(*spec.num_range)
        for _attempt in range(10_000):
            numbers = [rng.randint(1, spec.max_number) for _ in range(size)]
            value, solution = _random_solution(rng, numbers)
            if low_t <= value <= high_t:
                break
        else:
            raise DataPrepError(
                f"could not generate {size}-number tasks with targets in {spec.target_range}: "
                "widen --target_range or change --max_number"
            )
        tasks.append(Puzzle(tuple(numbers), value, solution, len(tasks)))
        if progress is not None:
            progress.update(1)
    return tasks


# --- exact solver --------------------------------------------------------------------------------


#: Most numbers ``--require_solvable`` verifies: the search grows exponentially with the count
#: (5 numbers: under a second at worst; 6: up to ~15 s per unsolvable task; 9: hours).
MAX_SOLVE_NUMBERS = 6
#: Search steps per task before the solver gives up; above every 5-number search, so only
#: larger tasks can run out.
SOLVER_BUDGET = 200_000


class SolverGaveUp(Exception):
    """The search used its step budget without deciding whether the task is solvable."""


def solve(numbers: Sequence[int], target: int, budget: int = SOLVER_BUDGET) -> str | None:
    """An expression using every number once with + - * / that equals ``target``, or None.

    Exact over the rationals, the same grammar the reward accepts. Raises SolverGaveUp after
    ``budget`` search steps, so no task can make it run for long.
    """
    goal = Fraction(target)
    dead: set[tuple[Fraction, ...]] = set()
    steps = 0

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        nonlocal steps
        steps += 1
        if steps > budget:
            raise SolverGaveUp(f"no decision after {budget:,} search steps")
        if len(items) == 1:
            return items[0][1] if items[0][0] == goal else None
        state = tuple(sorted(v for v, _ in items))
        if state in dead:
            return None
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                (a, a_text), (b, b_text) = items[i], items[j]
                rest = [items[k] for k in range(len(items)) if k not in (i, j)]
                candidates = [
                    (a + b, f"({a_text} + {b_text})"),
                    (a * b, f"({a_text} * {b_text})"),
                    (a - b, f"({a_text} - {b_text})"),
                    (b - a, f"({b_text} - {a_text})"),
                ]
                if b:
                    candidates.append((a / b, f"({a_text} / {b_text})"))
                if a:
                    candidates.append((b / a, f"({b_text} / {a_text})"))
                for candidate in candidates:
                    found = search([*rest, candidate])
                    if found is not None:
                        return found
        dead.add(state)
        return None

    found = search([(Fraction(n), str(n)) for n in numbers])
    if found is not None and found.startswith("(") and len(numbers) > 1:
        found = found[1:-1]
    return found


# --- sources, splits, rows -----------------------------------------------------------------------


def puzzles_from_dataset(dataset: Any, where: str) -> list[Puzzle]:
    """Tasks from a dataset with ``nums`` (list) and ``target`` columns."""
    require_columns(dataset, ["nums", "target"], where)
    tasks = []
    for index, row in enumerate(dataset):
        at = f"{where}: row {index}"
        raw = row["nums"]
        if isinstance(raw, list) and len(raw) > MAX_NUMBERS:  # refused before parsing them all
            raise DataPrepError(
                f"{at}, field 'nums': {len(raw):,} numbers; the reward grades tasks of 1 to "
                f"{MAX_NUMBERS} numbers (remove the row)"
            )
        numbers = parse_int_list(raw, f"{at}, field 'nums'")
        if not numbers:
            raise DataPrepError(f"{at}, field 'nums': empty list")
        target = parse_int(row["target"], f"{at}, field 'target'")
        problem = task_problem(numbers, target)  # the reward's own bounds
        if problem is not None:
            raise DataPrepError(f"{at}: {problem}, so every answer would score 0 (remove the row)")
        tasks.append(Puzzle(tuple(numbers), target, "", index))
    return tasks


@dataclass
class SplitReport:
    train: list[Puzzle]
    test: list[Puzzle]
    dropped_overlap: int = 0
    dropped_unsolvable: int = 0
    dropped_unverified: int = 0


def split_puzzles(
    tasks: list[Puzzle], test_size: int, train_size: int | None, seed: int
) -> SplitReport:
    """TuFT's split: test = the first ``test_size`` rows, train = the rest shuffled with
    ``seed`` (capped at ``train_size``). Train rows whose (numbers, target) is in test are dropped.
    """
    if test_size < 1:
        raise DataPrepError("--test_size must be at least 1")
    if train_size is not None and train_size < 1:
        raise DataPrepError("--train_size must be at least 1 (omit it to keep every train row)")
    if len(tasks) <= test_size:
        raise DataPrepError(
            f"only {len(tasks)} tasks: not enough for --test_size {test_size} plus a train split"
        )
    test = tasks[:test_size]
    rest = tasks[test_size:]
    random.Random(seed).shuffle(rest)
    test_keys = {t.key for t in test}
    train = [t for t in rest if t.key not in test_keys]
    dropped = len(rest) - len(train)
    if train_size is not None:
        train = train[:train_size]
    if not train:
        raise DataPrepError("the train split is empty after removing overlaps with test")
    return SplitReport(train=train, test=test, dropped_overlap=dropped)


def numbers_histogram(tasks: Iterable[Puzzle]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for task in tasks:
        counts[len(task.numbers)] = counts.get(len(task.numbers), 0) + 1
    return dict(sorted(counts.items()))

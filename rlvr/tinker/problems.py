"""The task's prompts as token ids, its reward, and each step's batch: what the Tinker loop samples
from and grades with, the same Parquet rows and ``rewards/`` file a verl run of the task uses.

Prompts are rendered as verl's ``RLHFDataset`` renders them (``apply_chat_template`` with
``add_generation_prompt=True`` and ``data.apply_chat_template_kwargs``, then encoded without
special tokens); a prompt over ``data.max_prompt_length`` tokens is refused, as verl's
``truncation: error`` does.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.tasks.spec import load_reward_function


@dataclass(frozen=True)
class Problem:
    """One prompt of the task's data, rendered and tokenized."""

    index: int  # its row in the Parquet file
    text: str  # the rendered prompt, as the rollout dumps show it
    tokens: tuple[int, ...]
    ground_truth: Any
    data_source: str
    extra_info: Any


def load_problems(
    path: str,
    tokenizer: Any,
    template_kwargs: dict[str, Any],
    max_prompt_tokens: int,
    limit: int = -1,
) -> list[Problem]:
    """The first ``limit`` rows of a verl-schema Parquet file (all with -1) as problems."""
    import pandas as pd

    frame = pd.read_parquet(path)
    if limit > 0:
        frame = frame.iloc[:limit]
    problems = []
    for index, row in enumerate(frame.itertuples(index=False)):
        messages = [dict(m) for m in row.prompt]
        text = str(
            tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False, **template_kwargs
            )
        )
        tokens = tuple(tokenizer.encode(text, add_special_tokens=False))
        if len(tokens) > max_prompt_tokens:
            raise ValueError(
                f"{path}: row {index}: the prompt has {len(tokens)} tokens, over "
                f"data.max_prompt_length={max_prompt_tokens}"
            )
        problems.append(
            Problem(
                index=index,
                text=text,
                tokens=tokens,
                ground_truth=row.reward_model["ground_truth"],
                data_source=str(row.data_source),
                extra_info=getattr(row, "extra_info", None),
            )
        )
    if not problems:
        raise ValueError(f"{path}: no rows")
    return problems


def batch_rows(step: int, batch_size: int, rows: int, seed: int) -> list[int]:
    """The rows step ``step`` (from 1) trains on: each epoch is one shuffle of the rows (seeded by
    the epoch), cut into batches in order, so that a resumed run takes the batches it would have."""
    if rows < 1 or batch_size < 1:
        return []
    picked: list[int] = []
    start = (step - 1) * batch_size
    while len(picked) < batch_size:
        epoch, offset = divmod(start + len(picked), rows)
        order = list(range(rows))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        picked += order[offset : offset + batch_size - len(picked)]
    return picked


Grader = Callable[[Problem, str], dict[str, Any]]


def grader(path: str, name: str, kwargs: dict[str, Any]) -> Grader:
    """The task's reward called as verl's reward manager calls it, as a dict with ``score``."""
    function = load_reward_function(path, name)  # type: ignore[arg-type]

    def grade(problem: Problem, response: str) -> dict[str, Any]:
        result = function(
            problem.data_source, response, problem.ground_truth, problem.extra_info, **kwargs
        )
        return result if isinstance(result, dict) else {"score": float(result)}

    return grade


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")

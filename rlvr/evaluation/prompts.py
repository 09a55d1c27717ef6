"""The prompts stage: the data-prep Parquet's rows, checked, and each prompt rendered exactly as
verl's ``RLHFDataset`` renders it in training (the tokenizer's chat template over the ``prompt``
messages, ``add_generation_prompt=True``, the same template kwargs, no extra special tokens).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.common.messages import first_line
from rlvr.data.prep import DATA_COLUMNS
from rlvr.evaluation import EvalError
from rlvr.evaluation.records import jsonable
from rlvr.tasks import TaskSpec

Row = dict[str, Any]  # one data-prep Parquet row as pandas hands it back, plus "_index"

PARQUET_MAGIC = b"PAR1"


def read_parquet(path: Path, label: str = "--data") -> Any:
    """The file as a DataFrame; one-line errors, starting with ``label`` (where the path came
    from), for a folder, a missing, non-Parquet or unreadable file."""
    import pandas as pd

    if path.is_dir():
        raise EvalError(f"{label} {path}: is a folder; pass a .parquet file written by data prep")
    if not path.exists():
        raise EvalError(
            f"{label} {path}: no such file (create it with the task's data prep script)"
        )
    if not path.is_file():  # a FIFO, socket or device: reading it could block or never end
        raise EvalError(
            f"{label} {path}: not a regular file; pass the .parquet written by data prep"
        )
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic != PARQUET_MAGIC:
        raise EvalError(
            f"{label} {path}: not a Parquet file; pass the .parquet written by the task's data "
            "prep script"
        )
    try:
        return pd.read_parquet(path)
    except Exception as exc:
        raise EvalError(f"{label} {path}: not a readable Parquet file ({first_line(exc)})") from exc


def load_rows(
    data_path: str | Path, limit: int | None = None, task: TaskSpec | None = None
) -> list[Row]:
    """The first ``limit`` rows of a data-prep Parquet, checked for verl's columns and, given a
    task, for rows of that task (another task's rows would all score 0, silently)."""
    path = Path(data_path)
    frame = read_parquet(path)
    missing = [c for c in DATA_COLUMNS if c not in frame.columns]
    if missing:
        raise EvalError(f"--data {path}: missing column(s) {missing}; expected verl's schema")
    if frame.empty:
        raise EvalError(f"--data {path}: no rows")
    if task is not None:
        sources = sorted({str(s) for s in frame["data_source"]})
        if sources != [task.data_source]:
            raise EvalError(
                f"--data {path}: holds data_source {sources}, but the {task.name} reward grades "
                f"{task.data_source!r} rows; pass {task.name} data (create it with: "
                f"{task.prep_command})"
            )
    rows: list[Row] = (frame.head(limit) if limit else frame).to_dict("records")
    for index, row in enumerate(rows):
        if not isinstance(row["reward_model"], dict) or "ground_truth" not in row["reward_model"]:
            raise EvalError(f"--data {path}: row {index}: reward_model has no ground_truth")
        problem = prompt_problem(row["prompt"])
        if problem:
            raise EvalError(
                f"--data {path}: row {index}: prompt {problem}; expected chat messages, "
                '[{"role": "user", "content": "..."}], as data prep writes them'
            )
        row["_index"] = index
    return rows


def prompt_problem(prompt: object) -> str | None:
    """Why ``prompt`` is not a list of chat messages the chat template can render, or None.
    Parquet list columns come back from pandas as numpy arrays."""
    if isinstance(prompt, (str, bytes, dict)) or not hasattr(prompt, "__iter__"):
        return f"is a {type(prompt).__name__}, not a list of messages"
    messages = list(prompt)
    if not messages:
        return "has no messages"
    for number, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"message {number} is a {type(message).__name__}, not an object"
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                return f"message {number} has no {key} string"
    return None


def render_prompt(
    tokenizer: Any, messages: Sequence[dict[str, str]], **template_kwargs: Any
) -> list[int]:
    """Token ids of a prompt exactly as verl's RLHFDataset builds them."""
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=True, tokenize=False, **template_kwargs
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def tokenizer_of(backend: Any) -> Any:
    """The tokenizer a backend decodes with; prompts are rendered with the same one."""
    tokenizer = getattr(backend, "tokenizer", None)  # every backend has one; Backend omits it
    if tokenizer is None:
        raise EvalError(f"backend {backend.name}: no tokenizer to render prompts with")
    return tokenizer


def _sha256(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def fingerprints(
    rows: Sequence[dict[str, Any]], rendered: Sequence[Sequence[int]]
) -> dict[str, str]:
    """The header's hashes: the rows' prompt messages and ground truths, in order, and the
    token ids each prompt was rendered to."""
    data = [[jsonable(r["prompt"]), jsonable(r["reward_model"]["ground_truth"])] for r in rows]
    return {
        "prompts_sha256": _sha256(data),
        "rendered_sha256": _sha256([list(ids) for ids in rendered]),
    }

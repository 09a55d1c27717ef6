"""Pre-flight checks on a run's data files: each exists, is Parquet with verl's columns and
chat-message prompts, has rows, and holds rows of the task the reward grades. Read with pyarrow
before Ray starts; verl itself would fail on them only inside its dataloader or, for another
task's rows, not at all (every reward 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.common.messages import first_line
from rlvr.data.prep import DATA_COLUMNS
from rlvr.tasks import TaskSpec

PARQUET_MAGIC = b"PAR1"  # a Parquet file starts and ends with it


def _parquet_problem(path: Path) -> str | None:
    """Why ``path`` is not a Parquet file, from its magic bytes (cheap, before pyarrow)."""
    if path.is_dir():
        return "is a folder; point it at a .parquet file"
    if not path.exists():
        return "does not exist"
    if not path.is_file():
        return "is not a regular file (a pipe or device); point it at a .parquet file"
    with path.open("rb") as handle:
        head = handle.read(4)
        handle.seek(max(0, path.stat().st_size - 4))
        tail = handle.read(4)
    if head != PARQUET_MAGIC or tail != PARQUET_MAGIC:
        return "is not a Parquet file (no PAR1 magic bytes)"
    return None


def data_files(files: Any) -> list[str]:
    """``data.train_files``/``val_files`` as verl reads them: one path, or a list of paths."""
    if isinstance(files, str):
        return [files] if files.strip() else []
    if files is None or isinstance(files, bool | int | float):
        return []
    try:
        return [str(path) for path in files]
    except TypeError:
        return []


def _is_list_of(kind: Any, fields: tuple[str, ...]) -> bool:
    """Whether an Arrow type is a list of structs with these fields (verl's chat messages)."""
    import pyarrow as pa

    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return False
    value = kind.value_type
    return pa.types.is_struct(value) and all(value.get_field_index(f) >= 0 for f in fields)


def _column_problem(path: str, schema: Any) -> str | None:
    """Why the ``prompt`` or ``reward_model`` column is not what verl reads: chat messages
    (a list of {role, content}) and a struct with ``ground_truth``. The types, then the first
    rows' prompts (a null or empty message list fails only inside the dataloader)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    prompt = schema.field("prompt").type
    if not _is_list_of(prompt, ("role", "content")):
        return (
            f"column prompt is {prompt}, not verl's chat messages (a list of {{role, content}}); "
            "write it as [{'role': 'user', 'content': ...}]"
        )
    reward = schema.field("reward_model").type
    if not (pa.types.is_struct(reward) and reward.get_field_index("ground_truth") >= 0):
        return f"column reward_model is {reward}, not a struct with ground_truth"
    batch = next(pq.ParquetFile(path).iter_batches(batch_size=16, columns=["prompt"]), None)
    rows = [] if batch is None else batch.column(0).to_pylist()
    for row, messages in enumerate(rows):
        if not messages or any(
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
            for m in messages
        ):
            return f"row {row}: prompt {messages!r} is not a non-empty list of {{role, content}}"
    return None


def data_problems(config: Any, task: TaskSpec | None) -> list[str]:
    """Each data file exists, is Parquet with verl's columns, has rows, and holds rows of the
    task the reward grades (GSM8K rows under the Countdown reward would all score 0, silently)."""
    import pyarrow.parquet as pq

    problems = []
    hint = f"; create it with: {task.prep_command}" if task else ""
    for key in ("train_files", "val_files"):
        files = config.data.get(key)
        paths = data_files(files)
        if not paths:
            problems.append(f"data.{key}={files}: names no file; set it to a .parquet file{hint}")
            continue
        for path in paths:
            problem = _parquet_problem(Path(path))
            if problem is not None:
                problems.append(f"data.{key}: {path} {problem}{hint}")
                continue
            try:
                parquet = pq.ParquetFile(path)
                schema, rows = parquet.schema_arrow, parquet.metadata.num_rows
            except Exception as exc:
                problems.append(
                    f"data.{key}: {path} is not readable Parquet ({first_line(exc)}){hint}"
                )
                continue
            missing = [c for c in DATA_COLUMNS if c not in schema.names]
            if missing:
                problems.append(f"data.{key}: {path} lacks column(s) {missing}{hint}")
                continue
            if rows == 0:
                problems.append(f"data.{key}: {path} has no rows{hint}")
                continue
            try:
                column_problem = _column_problem(path, schema)
                table = pq.read_table(path, columns=["data_source"])
            except Exception as exc:
                problems.append(
                    f"data.{key}: {path} is not readable Parquet ({first_line(exc)}){hint}"
                )
                continue
            if column_problem is not None:
                problems.append(f"data.{key}: {path} {column_problem}{hint}")
                continue
            sources = sorted({str(s) for s in table.column("data_source").to_pylist()})
            if task and sources != [task.data_source]:
                problems.append(
                    f"data.{key}: {path} holds data_source {sources}, but the reward grades "
                    f"{task.name} ({task.data_source!r}); point data.{key} at {task.name} data"
                    f"{hint}"
                )
    return problems

"""Data prep plumbing shared by the tasks: loading sources, row checks, atomic Parquet writes."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The columns verl's RLHFDataset and reward manager read from every row.
DATA_COLUMNS = ("data_source", "prompt", "reward_model")
LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


class DataPrepError(Exception):
    """Bad input: the message names the file, row and field. Scripts exit with code 2."""


def load_source(source: str, hub_name: str, hub_config: str | None = None) -> dict[str, Any]:
    """The splits of a source as ``{split: datasets.Dataset}``.

    ``source`` is ``"hf"`` (the hub dataset ``hub_name``), a local file (.jsonl/.json/.parquet/
    .csv, loaded as one ``train`` split), or a local folder (``save_to_disk`` output, or files
    named by split such as ``train.parquet`` and ``test.parquet``). Local files go through the
    same ``datasets`` code path as the hub.
    """
    import datasets

    if source == "hf":
        try:
            loaded = datasets.load_dataset(hub_name, hub_config)
        except Exception as exc:  # network, auth, offline mode, missing dataset
            raise DataPrepError(
                f"could not load {hub_name!r} from the Hugging Face hub ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}). Without hub access, download it "
                "elsewhere and pass a local file or folder with --source PATH."
            ) from exc
        return dict(loaded)

    path = Path(source)
    if not path.exists():
        raise DataPrepError(f"--source {source!r}: no such file or folder (or use --source hf)")
    try:
        if path.is_dir():
            if (path / "dataset_dict.json").exists() or (path / "dataset_info.json").exists():
                loaded = datasets.load_from_disk(str(path))
                return (
                    dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}
                )
            return dict(datasets.load_dataset(str(path)))
        builder = LOCAL_FORMATS.get(path.suffix.lower())
        if builder is None:
            raise DataPrepError(
                f"{path}: unsupported file type {path.suffix!r}; use one of {sorted(LOCAL_FORMATS)}"
            )
        if path.stat().st_size == 0:
            raise DataPrepError(f"{path}: the file is empty")
        return {"train": datasets.load_dataset(builder, data_files=str(path), split="train")}
    except DataPrepError:
        raise
    except Exception as exc:
        raise DataPrepError(f"{path}: could not be read ({type(exc).__name__}: {exc})") from exc


def require_columns(dataset: Any, columns: Sequence[str], where: str) -> None:
    """Fail with the missing column names and the ones that exist."""
    have = list(dataset.column_names)
    missing = [c for c in columns if c not in have]
    if missing:
        raise DataPrepError(f"{where}: missing column(s) {missing}; the columns are {have}")
    if len(dataset) == 0:
        raise DataPrepError(f"{where}: no rows")


def parse_int_list(value: Any, where: str) -> list[int]:
    """A list of ints from a list, numpy array, or JSON text such as ``"[1, 2, 3]"`` (CSV)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise DataPrepError(f"{where}: {value!r} is not a list of integers") from exc
    if value is None or isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise DataPrepError(f"{where}: {value!r} is not a list of integers")
    return [parse_int(v, where) for v in value]


def parse_int(value: Any, where: str) -> int:
    """An exact integer (numpy ints, integral floats and numeric strings accepted)."""
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(value) if not isinstance(value, str) else int(value.strip())
        if number != value and not isinstance(value, str):
            raise ValueError
        return number
    except (TypeError, ValueError, OverflowError):
        raise DataPrepError(f"{where}: {value!r} is not an integer") from None


MAX_ROWS = 10_000_000  # beyond any real split; a typo'd size fails here, not after hours


def row_count(text: str) -> int:
    """An argparse type for a number of rows: a whole number from 0 to MAX_ROWS."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value <= MAX_ROWS:
        raise argparse.ArgumentTypeError(f"{value} rows: must be between 0 and {MAX_ROWS:,}")
    return value


def add_split_arguments(
    parser: argparse.ArgumentParser, *, test_default: int | None, train_help: str, test_help: str
) -> None:
    """The flags every task's prep shares: the template, split sizes, the shuffle seed."""
    parser.add_argument("--train_size", type=row_count, default=None, help=train_help)
    parser.add_argument("--test_size", type=row_count, default=test_default, help=test_help)
    parser.add_argument("--seed", type=int, default=42, help="shuffle (and generator) seed")


def split_options(args: argparse.Namespace) -> dict[str, Any]:
    """The values of :func:`add_split_arguments`' flags, as ``prepare`` keyword arguments."""
    return {"train_size": args.train_size, "test_size": args.test_size, "seed": args.seed}


def chat_prompt(user: str, system: str | None = None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user})
    return messages


def write_splits(
    local_dir: str | os.PathLike[str], splits: Mapping[str, list[dict]]
) -> dict[str, Path]:
    """Write ``{split}.parquet`` files atomically: all of them, or nothing at the destination.

    Every split is written to a temporary folder beside the destination first; only when all
    are written are they moved into place.
    """
    import pandas as pd

    destination = Path(local_dir)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    created_destination = not destination.exists()
    try:
        for split, rows in splits.items():
            if not rows:
                raise DataPrepError(f"split {split!r} would be empty")
            pd.DataFrame(rows).to_parquet(staging / f"{split}.parquet", index=False)
        destination.mkdir(parents=True, exist_ok=True)
        written = {}
        for split in splits:
            target = destination / f"{split}.parquet"
            os.replace(staging / f"{split}.parquet", target)
            written[split] = target
        return written
    except BaseException:
        if created_destination and destination.exists() and not any(destination.iterdir()):
            destination.rmdir()
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@dataclass
class PrepResult:
    """What a task's prep wrote: files and row counts by split, rows dropped by reason, one
    example row, and the summary lines the CLI prints."""

    paths: dict[str, Path]
    counts: dict[str, int]
    dropped: dict[str, int]
    example: dict[str, Any]
    lines: list[str]


def run_prep_cli(prepare_call: Callable[[], PrepResult]) -> int:
    """Run a task's ``prepare``; print its summary and an example row, or the error (exit 2)."""
    try:
        result = prepare_call()
    except DataPrepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in result.lines:
        print(line)
    print("example row:")
    print(json.dumps(result.example, indent=2))
    return 0

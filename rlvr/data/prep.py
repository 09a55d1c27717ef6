"""Data prep plumbing shared by the tasks: loading sources, row checks, atomic Parquet writes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.common.files import (
    DiskFullError,
    disk_full_translated,
    is_disk_full,
    output_folder_problem,
    report_disk_full,
    staged_dir,
)
from rlvr.common.messages import first_line
from rlvr.common.signals import sigterm_as_interrupt

# The columns verl's RLHFDataset and reward manager read from every row.
DATA_COLUMNS = ("data_source", "prompt", "reward_model")
LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
# The split files a prep may have written: a rerun replaces them all (no stale val.parquet).
SPLIT_NAMES = ("train", "test", "val")


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
            with _cache_full_translated():
                loaded = datasets.load_dataset(hub_name, hub_config)
        except DiskFullError:
            raise
        except Exception as exc:  # network, auth, offline mode, missing dataset
            raise DataPrepError(
                f"could not load {hub_name!r} from the Hugging Face hub ({type(exc).__name__}: "
                f"{first_line(exc)}). Without hub access, download it "
                "elsewhere and pass a local file or folder with --source PATH."
            ) from exc
        return dict(loaded)

    path = Path(source)
    if not path.exists():
        raise DataPrepError(f"--source {source!r}: no such file or folder (or use --source hf)")
    # A local load takes a moment: its progress bars and log lines would only bury the one-line
    # error (the exception, which names the file and the cause, is reported instead).
    bars_were_on = datasets.is_progress_bar_enabled()
    verbosity = datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        with _cache_full_translated():
            return _load_local(path)
    finally:
        datasets.logging.set_verbosity(verbosity)
        if bars_were_on:
            datasets.enable_progress_bars()


def _load_local(path: Path) -> dict[str, Any]:
    import datasets

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
        if is_disk_full(exc):
            raise  # not a bad file: load_source names the cache
        # datasets wraps the useful cause ("changed from string to number in row 1")
        root = exc.__cause__ or exc
        raise DataPrepError(
            f"{path}: could not be read ({type(root).__name__}: {first_line(root)})"
        ) from exc


def _cache_full_translated() -> AbstractContextManager[None]:
    """A load that fills the disk with ``datasets``' cache (its Arrow files, under
    ``HF_DATASETS_CACHE``; a hub download's files go under ``HF_HUB_CACHE``, usually beside
    it) is no bad source: DiskFullError naming the cache."""
    import datasets

    return disk_full_translated(datasets.config.HF_DATASETS_CACHE)


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


def row_count(text: str, minimum: int = 0) -> int:
    """An argparse type for a number of rows: a whole number from ``minimum`` to MAX_ROWS."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not minimum <= value <= MAX_ROWS:
        raise argparse.ArgumentTypeError(
            f"{value} rows: must be between {minimum} and {MAX_ROWS:,}"
        )
    return value


def positive_row_count(text: str) -> int:
    """:func:`row_count` for a split that must not be empty."""
    return row_count(text, minimum=1)


def add_split_arguments(
    parser: argparse.ArgumentParser, *, test_default: int | None, train_help: str, test_help: str
) -> None:
    """The flags every task's prep shares: the template, split sizes, the shuffle seed."""
    parser.add_argument("--train_size", type=positive_row_count, default=None, help=train_help)
    parser.add_argument(
        "--test_size", type=positive_row_count, default=test_default, help=test_help
    )
    parser.add_argument("--seed", type=int, default=42, help="shuffle (and generator) seed")


def split_options(args: argparse.Namespace) -> dict[str, Any]:
    """The values of :func:`add_split_arguments`' flags, as ``prepare`` keyword arguments."""
    return {"train_size": args.train_size, "test_size": args.test_size, "seed": args.seed}


def chat_prompt(user: str, system: str | None = None) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user})
    return messages


def sft_columns(prompt: list[dict[str, str]], response: str, where: str) -> dict[str, str]:
    """The columns verl 0.6.1's SFTDataset reads (``data.prompt_key``, ``data.response_key``).

    It wraps the prompt text in one user message and applies the chat template, as RLHFDataset
    does with the GRPO row's message list, so the two render the same tokens only when that list
    is exactly one user message (tests/test_sft.py compares them token for token).
    """
    if len(prompt) != 1 or prompt[0].get("role") != "user":
        roles = [message.get("role") for message in prompt]
        raise DataPrepError(
            f"{where}: SFT data needs a prompt of one user message (verl's SFTDataset renders "
            f"only that), this one has {roles}; choose another template"
        )
    return {"sft_prompt": prompt[0]["content"], "sft_response": response}


def check_destination(
    local_dir: str | os.PathLike[str], splits: Iterable[str] = SPLIT_NAMES
) -> Path:
    """``local_dir`` as the folder data prep may replace whole, or DataPrepError.

    It may hold only split files (``<split>.parquet``): anything else is someone's data, which a
    rerun must not delete. A symlink is refused (the swap would replace the link itself, or a
    dangling one would make prep create its target somewhere else), and so is a place that
    cannot be written (a read-only folder would fail only after the work). Prep calls this
    before any work, and again before the swap.
    """
    problem = output_folder_problem(local_dir, "--local_dir")
    if problem is not None:
        raise DataPrepError(problem)
    destination = Path(os.path.realpath(local_dir))  # "." and ".." have no name to stage beside
    if destination.exists() and not destination.is_dir():
        raise DataPrepError(f"--local_dir {local_dir}: is a file; pass a folder")
    if destination.is_dir():
        ours = {f"{split}.parquet" for split in (*SPLIT_NAMES, *splits)}
        others = sorted(p.name for p in destination.iterdir() if p.name not in ours)
        if others:
            listed = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise DataPrepError(
                f"--local_dir {local_dir}: holds {listed}, not data prep output, and the folder is "
                "replaced whole; pass a new folder or one only data prep wrote"
            )
    return destination


def write_splits(
    local_dir: str | os.PathLike[str], splits: Mapping[str, list[dict]]
) -> dict[str, Path]:
    """Write ``{split}.parquet`` for every split: ``local_dir`` ends up holding exactly these
    files, all new, or is left as it was.

    The files are written to a staging folder beside ``local_dir``, which then replaces it in
    one swap with SIGINT/SIGTERM held back, so an interrupted prep never leaves half-written,
    mixed old/new, or stale files (a ``val.parquet`` from an earlier run with ``--val_size``).
    Every split is encoded in memory first, so a full disk is reported (DiskFullError) with
    the bytes the whole write needs.
    """
    destination = check_destination(local_dir, splits)
    encoded = _encode_splits(splits)
    with staged_dir(destination, needed_bytes=sum(map(len, encoded.values()))) as staging:
        for split, data in encoded.items():
            (staging / f"{split}.parquet").write_bytes(data)
        check_destination(local_dir, splits)  # again: files may have appeared meanwhile
    return {split: destination / f"{split}.parquet" for split in splits}


def _encode_splits(splits: Mapping[str, list[dict]]) -> dict[str, bytes]:
    """Each split's Parquet file, as bytes (data prep's splits are megabytes at most)."""
    import pandas as pd

    encoded = {}
    for split, rows in splits.items():
        if not rows:
            raise DataPrepError(f"split {split!r} would be empty")
        encoded[split] = pd.DataFrame(rows).to_parquet(index=False)
    return encoded


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
    """Run a task's ``prepare``; print its summary and an example row, or the error in one
    line: exit 2 for bad input, 1 for a full disk (the output folder is as it was).

    SIGTERM is handled like Ctrl-C (exit 130): the staging folder is removed and the output
    folder keeps its previous data (by default SIGTERM ends Python without any cleanup).
    """
    try:
        with sigterm_as_interrupt():
            result = prepare_call()
    except DataPrepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "interrupted: the output folder holds the previous data or the new, whole",
            file=sys.stderr,
        )
        return 130
    except Exception as exc:  # a full disk is one line, exit 1; anything else is a bug
        return report_disk_full(exc)
    for line in result.lines:
        print(line)
    print("example row:")
    print(json.dumps(result.example, indent=2))
    return 0

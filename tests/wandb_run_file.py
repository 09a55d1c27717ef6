"""What wandb itself wrote: the records of an offline run file (``run-*.wandb``), for the tests
that check every step reached wandb and the benchmark that times a commit without metrics.jsonl.
No public wandb API reads an offline run, so this reads its internal store; the library itself
reads verl's file logger (metrics.jsonl) instead."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def wandb_records(run_file: Path) -> Iterator[tuple[str, Any]]:
    """(record type, record) for every record of an offline wandb run file."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    store = datastore.DataStore()
    store.open_for_scan(str(run_file))
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        yield record.WhichOneof("record_type"), record


def wandb_history(run_file: Path) -> tuple[dict[int, dict[str, Any]], set[str]]:
    """An offline wandb run's rows by ``training/global_step``, and its record types."""
    rows: dict[int, dict[str, Any]] = defaultdict(dict)
    kinds = {kind for kind, _ in wandb_records(run_file)}
    for row in history_rows(run_file):
        if "training/global_step" in row:
            rows[int(row["training/global_step"])].update(row)
    return dict(rows), kinds


def history_rows(run_file: Path) -> Iterator[dict[str, Any]]:
    """Every history row of an offline wandb run, as {key: value}, in logging order."""
    for kind, record in wandb_records(run_file):
        if kind == "history":
            yield {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }

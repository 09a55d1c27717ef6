"""What wandb itself wrote: the records of an offline run file (``run-*.wandb``), for the tests
that check every step, the config and the tables reached wandb (verl's runs and Tinker's, side
by side) and the benchmark that times a commit without metrics.jsonl.
No public wandb API reads an offline run, so this reads its internal store; the library itself
reads verl's file logger (metrics.jsonl) instead."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class WandbRun:
    """What an offline wandb run file recorded: its identity, config, exit and history."""

    run_id: str
    name: str
    project: str
    group: str
    config: dict[str, Any]  # the run's config, as {top-level key: value} (wandb's own keys out)
    exit_code: int | None  # None: the run was never finished
    steps: dict[int, dict[str, Any]]  # the history rows, merged by their _step


def read_run(run_file: Path) -> WandbRun:
    identity: dict[str, str] = {}
    config: dict[str, Any] = {}
    exit_code = None
    steps: dict[int, dict[str, Any]] = defaultdict(dict)
    for kind, record in wandb_records(run_file):
        if kind == "run":
            run = record.run
            identity = identity or {"run_id": run.run_id, "name": run.display_name,
                                    "project": run.project, "group": run.run_group}  # fmt: skip
            items = run.config.update
        elif kind == "config":
            items = record.config.update
        else:
            if kind == "exit":
                exit_code = record.exit.exit_code
            continue
        config.update({item.key: json.loads(item.value_json) for item in items})
    for row in history_rows(run_file):
        steps[int(row["_step"])].update(row)
    config.pop("_wandb", None)
    return WandbRun(**identity, config=config, exit_code=exit_code, steps=dict(steps))


def offline_runs(wandb_dir: Path) -> list[WandbRun]:
    """Every offline run under ``wandb_dir`` (``WANDB_DIR/wandb``), oldest first."""
    return [read_run(path) for path in sorted(wandb_dir.glob("offline-run-*/run-*.wandb"))]


#: The metric names a verl run and a Tinker run of the Countdown recipe share on the dashboard,
#: read off both runs logged side by side offline (docs/TINKER.md lists them, and
#: test_tinker_e2e and test_train_e2e each check their run logs every one).
VERL_AND_TINKER_METRICS = (
    "actor/grad_norm", "actor/lr", "actor/pg_loss", "actor/skipped_update",
    "critic/advantages/max", "critic/advantages/mean", "critic/advantages/min",
    "critic/rewards/max", "critic/rewards/mean", "critic/rewards/min",
    "critic/score/max", "critic/score/mean", "critic/score/min",
    "perf/time_per_step", "perf/total_num_tokens",
    "prompt_length/clip_ratio", "prompt_length/max", "prompt_length/mean", "prompt_length/min",
    "response_length/clip_ratio", "response_length/max", "response_length/mean",
    "response_length/min",
    "timing_s/gen", "timing_s/save_checkpoint", "timing_s/step", "timing_s/testing",
    "timing_s/update_actor", "training/epoch", "training/global_step",
    "val-aux/countdown/bad_ground_truth/mean@1", "val-aux/countdown/correct/mean@1",
    "val-aux/countdown/format/mean@1", "val-aux/countdown/reward/mean@1",
    "val-aux/countdown/score/mean@1", "val-aux/countdown/valid/mean@1",
    "val-core/countdown/acc/mean@1",
)  # fmt: skip

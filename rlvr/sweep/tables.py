"""A sweep's results table: one row per grid point, as CSV and as Markdown."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.common.files import write_text_atomic
from rlvr.sweep.folder import SweepRow
from rlvr.sweep.history import REWARD_KEY

TABLE_COLUMNS = ("final_reward", "peak_reward", "best_val", "initial_val", "steps", "collapsed")


def fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _row_cells(row: SweepRow, axes: Sequence[str]) -> list[str]:
    s = row.summary
    return [
        row.name,
        *(row.values[a] for a in axes),
        row.state,
        fmt(s.final_reward) if s else "",
        fmt(s.peak_reward) if s else "",
        fmt(s.best_val) if s else "",
        fmt(s.initial_val) if s else "",
        str(s.steps) if s else "0",
        ("yes" if s.collapsed else "no") if s else "",
        row.reason or (s.collapse_reason if s else ""),
    ]


def _table(rows: Sequence[SweepRow]) -> tuple[list[str], list[list[str]]]:
    axes = list(rows[0].values) if rows else []
    header = ["run", *axes, "state", *TABLE_COLUMNS, "note"]
    return header, [_row_cells(row, axes) for row in rows]


def results_csv(rows: Sequence[SweepRow]) -> str:
    header, body = _table(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(body)
    return buffer.getvalue()


def results_markdown(record: dict[str, Any], rows: Sequence[SweepRow]) -> str:
    header, body = _table(rows)
    grid = "; ".join(f"{axis} = {', '.join(values)}" for axis, values in record["grid"].items())
    lines = [
        f"# Sweep {record['name']}: {record['experiment']}",
        "",
        f"Grid: {grid}. "
        f"Final reward = mean `{REWARD_KEY}` over the last 5 steps; best val = best "
        "`val-core` score after step 0; collapsed = a non-finite loss or reward, or a reward "
        "moving average that ends under half its peak.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in body]
    finished = [
        (r.summary.final_reward, r.name)
        for r in rows
        if r.summary and r.summary.final_reward is not None
    ]
    if finished:
        reward, name = max(finished, key=lambda pair: pair[0])  # the first best on a tie
        lines += ["", f"Best final reward: **{name}** ({fmt(reward)})."]
    return "\n".join(lines) + "\n"


def write_tables(sweep_dir: Path, record: dict[str, Any], rows: Sequence[SweepRow]) -> list[Path]:
    paths = [sweep_dir / "results.csv", sweep_dir / "results.md"]
    for path, text in zip(paths, (results_csv(rows), results_markdown(record, rows)), strict=True):
        write_text_atomic(path, text)
    return paths

"""An eval run in WandB: its summary and a table of its first generations (``--wandb``)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from rlvr.evaluation.records import GradedSample, Summary, parse


def wandb_mode() -> str:
    """``WANDB_MODE`` when set, else online with an API key and offline without one."""
    return os.environ.get("WANDB_MODE") or (
        "online" if os.environ.get("WANDB_API_KEY") else "offline"
    )


def log_to_wandb(run_dir: Path, summary: Summary, project: str, max_rows: int = 200) -> str:
    """Log the summary numbers and a table of generations under ``run_dir/wandb``; returns the
    mode (offline unless a key is configured)."""
    import wandb

    mode = wandb_mode()
    flat = summary.to_json()
    wb = wandb.init(
        project=project,
        name=run_dir.name,
        group=f"eval-{summary.header.task}",
        job_type=f"eval-{summary.header.command}",
        config={k: v for k, v in flat.items() if not isinstance(v, float | int)},
        dir=str(run_dir),
        mode=mode,  # type: ignore[arg-type]  # a Literal there; wandb checks the value itself
        reinit="finish_previous",
    )
    wb.summary.update({k: v for k, v in flat.items() if isinstance(v, float | int)})
    table = wandb.Table(columns=["prompt_index", "sample", "response", "score", "finish_reason"])
    with open(run_dir / "samples.jsonl") as handle:
        for line in itertools.islice(handle, max_rows):
            s = parse(GradedSample, line, "samples.jsonl")
            table.add_data(s.prompt_index, s.sample, s.response, s.score, s.finish_reason)
    wb.log({"generations": table})
    wb.finish()
    return mode

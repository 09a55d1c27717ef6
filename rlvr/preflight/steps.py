"""Pre-flight: the number of steps a run will train, counted as verl 0.6.1 counts them.

``RayPPOTrainer._create_dataloader`` builds the train loader with ``drop_last=True`` and a batch
of ``data.gen_batch_size`` (default ``data.train_batch_size``) over the dataset, which holds the
train files' rows, cut to ``data.train_max_samples`` when that is smaller (verl's
``RLHFDataset``); ``fit`` loops ``trainer.total_epochs`` times over it and stops early at
``trainer.total_training_steps``. 30 rows at batch 32 make 0 batches: verl asserts "Train
dataloader is empty!" only after Ray and the workers have started. verl also drops prompts over
``max_prompt_length`` (``filter_overlong_prompts``), which needs the tokenizer: the rows counted
here are an upper bound, so a count of 0 is certain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlvr.preflight.data import data_files


@dataclass(frozen=True)
class StepCount:
    rows: int  # the train files' rows, after train_max_samples
    batch: int  # prompts per step (the loader's batch)
    batches: int  # per epoch: whole batches only (drop_last)
    epochs: int
    cap: int | None  # trainer.total_training_steps, when set

    @property
    def steps(self) -> int:
        total = self.batches * max(self.epochs, 0)
        # verl's loop ends after the step where global_steps >= the cap: at least one
        return total if self.cap is None else min(max(self.cap, 1), total)


def _rows(files: Any) -> int | None:
    """Rows over the train files; None when one is unreadable (``data_problems`` says why)."""
    import pyarrow.parquet as pq

    paths = data_files(files)
    if not paths:
        return None
    try:
        return sum(pq.ParquetFile(path).metadata.num_rows for path in paths)
    except Exception:
        return None


def step_count(config: Any) -> StepCount | None:
    """The run's steps as verl counts them; None when the data or the numbers are not
    readable yet (their own checks report those)."""
    data = config.data
    batch = data.get("gen_batch_size", data.train_batch_size)
    epochs = config.trainer.get("total_epochs")
    cap = config.trainer.get("total_training_steps")
    numbers = (batch, epochs) if cap is None else (batch, epochs, cap)
    if any(isinstance(n, bool) or not isinstance(n, int) for n in numbers) or batch <= 0:
        return None
    rows = _rows(data.train_files)
    if not rows:  # an empty file is data_problems' to report
        return None
    most = data.get("train_max_samples", -1)
    if isinstance(most, int) and 0 < most < rows:
        rows = most
    return StepCount(rows, batch, rows // batch, epochs, cap)


def zero_step_problems(config: Any) -> list[str]:
    """One line when the run would train 0 steps, with the numbers and the fix."""
    count = step_count(config)
    if count is None or count.steps > 0:
        return []
    key = "data.gen_batch_size" if config.data.get("gen_batch_size") else "data.train_batch_size"
    if count.batches == 0:
        most = config.data.get("train_max_samples", -1)
        cut = " (data.train_max_samples)" if isinstance(most, int) and most > 0 else ""
        return [
            f"0 training steps: {count.rows} train row(s){cut} make no whole batch of "
            f"{key}={count.batch} (verl drops the incomplete last batch); set {key} to at most "
            f"{count.rows}, or train on more rows"
        ]
    return [f"0 training steps: trainer.total_epochs={count.epochs}; set it to 1 or more"]

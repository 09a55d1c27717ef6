"""The learnable prompts of an analyse run: listed (``stats``) and written as training data
(``filter``)."""

from __future__ import annotations

from pathlib import Path

from rlvr.evaluation import metrics
from rlvr.evaluation.errors import EvalError
from rlvr.evaluation.outputs import new_file, refuse_existing
from rlvr.evaluation.records import AnalyseRecord, Summary, jsonable, load_summary, read_records


def load_prompt_records(path: str | Path) -> tuple[list[AnalyseRecord], Summary]:
    """An analyse run's per-prompt records and its summary."""
    path = Path(path)
    if not path.exists():
        raise EvalError(f"--input {path}: no such folder; pass an analyse run folder")
    run_dir = path if path.is_dir() else path.parent
    summary = load_summary(run_dir)
    if summary.header.command != "analyse":
        raise EvalError(
            f"{run_dir}: an {summary.header.command!r} run; stats/filter read analyse runs"
        )
    records_file = run_dir / "prompts.jsonl"
    if not records_file.is_file():
        raise EvalError(f"{run_dir}: no prompts.jsonl")
    return read_records(records_file, AnalyseRecord), summary


def high_value_prompts(
    records: list[AnalyseRecord], var_min: float, entropy_min: float
) -> list[AnalyseRecord]:
    """The learnable prompts, most informative (highest variance) first."""
    chosen = [r for r in records if metrics.is_learnable(r, var_min, entropy_min)]
    return sorted(chosen, key=lambda r: (-r.variance, r.prompt_index))


def filter_learnable(
    run_dir: str | Path,
    output: str | Path,
    var_min: float,
    entropy_min: float,
    force: bool = False,
) -> tuple[int, int]:
    """Write the analyse run's learnable prompts, as their original Parquet rows, to ``output``
    (atomically; an existing file only with ``force``).

    Returns (rows written, prompts analysed). The run's ground truths are checked against the
    data file so a regenerated data file cannot silently select the wrong rows.
    """
    import pandas as pd

    output = Path(output)
    refuse_existing(output, force)
    records, summary = load_prompt_records(run_dir)
    chosen = high_value_prompts(records, var_min, entropy_min)
    if not chosen:
        raise EvalError(
            f"no prompt of {len(records)} passes variance > {var_min} and entropy >= "
            f"{entropy_min}: nothing to write"
        )
    data = summary.header.data
    frame = pd.read_parquet(data)
    indices = sorted(r.prompt_index for r in chosen)
    by_index = {r.prompt_index: r for r in chosen}
    for index in indices:
        if index >= len(frame):
            raise EvalError(f"{data} has {len(frame)} rows; the run saw row {index}")
        actual = jsonable(frame.iloc[index]["reward_model"]["ground_truth"])
        if actual != by_index[index].ground_truth:
            raise EvalError(
                f"{data} row {index}: ground truth {actual!r} differs from the run's "
                f"{by_index[index].ground_truth!r}; the data file changed since the analyse run"
            )
    encoded = frame.iloc[indices].reset_index(drop=True).to_parquet(index=False)
    with new_file(output, force, needed_bytes=len(encoded)) as staging:
        staging.write_bytes(encoded)
    return len(indices), len(records)

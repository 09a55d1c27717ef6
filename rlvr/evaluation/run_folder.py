"""The run folder, written so that a folder never mixes two runs, and its Markdown.

A model command writes into a staging folder beside its ``--output``
(``.<name>.partial-<pid>``) and moves it into place whole once the run has completed. An
existing output is refused (``--force`` replaces it, and only after the new run completed);
an interrupted run leaves the old folder untouched and its partial samples in the staging
folder. Single files (``compare --output``, ``filter --output``) are written atomically under
the same rule. The records it holds are ``records.py``'s.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rlvr.common.files import (
    DiskFullError,
    disk_full_translated,
    replace_folder,
    staged,
    tree_size,
    write_json_atomic,
    write_text_atomic,
)
from rlvr.common.paths import ROOT
from rlvr.evaluation import EvalError, metrics
from rlvr.evaluation.prompts import read_parquet
from rlvr.evaluation.records import (
    AnalyseRecord,
    GradedSample,
    PassKRecord,
    Recommendations,
    Summary,
    jsonable,
    load_summary,
    parse,
    read_records,
    write_jsonl,
)


def default_output_dir(task: str, command: str, model_path: str) -> Path:
    """``artifacts/eval/<task>_<command>_<model>``, the model named by its distinctive parts."""
    parts = [p for p in Path(model_path).parts if p not in ("actor", "huggingface", "/")]
    slug = "-".join(parts[-2:]) if parts else "model"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", slug).strip("_.") or "model"
    return ROOT / "artifacts" / "eval" / f"{task}_{command}_{slug}"


RUN_FILES = ("summary.json", "samples.jsonl")  # what makes a folder an eval run folder


def check_writable(path: Path, flag: str = "--output") -> None:
    """Refuse, before any work, an output that could never be written: one below a file (or
    a dangling link), or in a folder this process may not write in."""
    path = Path(os.path.abspath(path))
    folder = path.parent
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if folder.is_symlink() and not folder.exists():
        raise EvalError(
            f"{flag} {path}: {folder} is a dangling symbolic link; choose another {flag}"
        )
    if not folder.is_dir():
        raise EvalError(f"{flag} {path}: {folder} is a file, not a folder; choose another {flag}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise EvalError(
            f"{flag} {path}: cannot write in {folder} (permission denied); choose another {flag}"
        )


def refuse_existing(path: Path, force: bool, flag: str = "--output", run: bool = False) -> None:
    """A one-line EvalError when ``path`` exists and ``--force`` was not given, when it is a
    symbolic link (dangling or not: a run would be moved onto the link, not into its target),
    or when it could not be written (``check_writable``). ``--force`` replaces a file, or with
    ``run`` an eval run folder (or an empty folder), never anything else."""
    if path.is_symlink():
        dangling = "" if path.exists() else ", which does not exist"
        raise EvalError(
            f"{flag} {path} is a symbolic link (to {os.readlink(path)}{dangling}); pass a real "
            "path, not a link"
        )
    check_writable(path, flag)
    if not os.path.lexists(path):
        return
    if not force:
        raise EvalError(
            f"{flag} {path} already exists; pass --force to replace it once the new results are "
            f"complete, or choose another {flag}"
        )
    if not run and path.is_dir():
        raise EvalError(f"{flag} {path} is a folder; --force replaces a file only")
    if run and not path.is_dir():
        raise EvalError(f"{flag} {path} is a file; --force replaces a run folder only")
    if run and any(path.iterdir()) and not any((path / name).exists() for name in RUN_FILES):
        raise EvalError(
            f"{flag} {path} is not an eval run folder (no {' or '.join(RUN_FILES)}); "
            "--force replaces run folders only"
        )


def output_dirs(task_name: str, args: argparse.Namespace) -> tuple[Path, Path | None]:
    """A model command's ``--output`` (default: ``default_output_dir``) and ``--greedy_output``
    (passk and analyse only, another folder), each refused here, before any work, as
    ``refuse_existing`` says."""
    output_dir = Path(args.output or default_output_dir(task_name, args.command, args.model_path))
    refuse_existing(output_dir, args.force, run=True)
    if not args.greedy_output:
        return output_dir, None
    if args.command == "reward":
        raise EvalError("--greedy_output is for passk and analyse: reward decodes greedily itself")
    folder = Path(args.greedy_output)
    if folder.resolve() == output_dir.resolve():
        raise EvalError(f"--greedy_output {folder} is --output too: give each run its own folder")
    refuse_existing(folder, args.force, run=True)
    return output_dir, folder


def check_complete_run(path: Path, what: str) -> None:
    """A run folder that a completed run published: its summary and samples (and, for a
    sampling command, its per-prompt records). A staging folder or a folder a user emptied by
    hand is refused, so nothing is compared or filtered on part of a run."""
    if not path.is_dir():
        return  # a summary.json file: load_summary judges it
    missing = [name for name in RUN_FILES if not (path / name).is_file()]
    if missing:
        raise EvalError(
            f"{what} {path}: not a complete eval run folder (no {', '.join(missing)}); pass a "
            "folder written by reward, passk or analyse"
        )


def staging_dir(output: Path) -> Path:
    """The folder a run writes into before it becomes ``output``."""
    return output.with_name(f".{output.name}.partial-{os.getpid()}")


@contextmanager
def staged_run_dir(output: Path, force: bool) -> Iterator[Path]:
    """A fresh staging folder beside ``output``, moved onto it whole when the block finishes.

    Without ``force`` an existing ``output`` is refused, before and after the block. When the
    block fails, ``output`` is untouched; a staging folder holding samples stays for a look
    (its path is printed), an empty one is removed. A full disk removes it in any case and
    raises DiskFullError naming ``output``.
    """
    output = Path(os.path.abspath(output))  # "." and ".." have no name to stage beside
    refuse_existing(output, force, run=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_dir(output)
    if staging.exists():  # left by an earlier process with this pid
        shutil.rmtree(staging)
    try:
        with disk_full_translated(output, written=lambda: tree_size(staging)):
            staging.mkdir()
            yield staging
            refuse_existing(output, force, run=True)  # again: it may have appeared during the run
            replace_folder(staging, output)  # an old run (--force) goes too, none left aside
    except DiskFullError:
        shutil.rmtree(staging, ignore_errors=True)  # the samples would only hold the disk full
        raise
    except BaseException:
        _keep_or_remove(staging, output)
        raise


def _keep_or_remove(staging: Path, output: Path) -> None:
    samples = staging / "samples.jsonl"
    if samples.is_file() and samples.stat().st_size > 0:
        # A signal between the summary's write and the swap: the run was not published, so the
        # folder kept for a look holds samples only, never a summary that reads as complete.
        for name in ("summary.json", "summary.md"):
            (staging / name).unlink(missing_ok=True)
        print(
            f"{output} is unchanged; this unfinished run's samples are in {staging}",
            file=sys.stderr,
        )
    else:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def new_file(
    path: Path, force: bool, flag: str = "--output", needed_bytes: int | None = None
) -> Iterator[Path]:
    """A staging path for ``path``, renamed onto it when the block finishes; an existing
    ``path`` is refused without ``force``. A full disk raises DiskFullError naming ``path``."""
    refuse_existing(path, force, flag)
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged(path, needed_bytes) as staging:
        yield staging


# Metrics shown in reports, in order; rates print as percentages.
REPORT_METRICS = (
    ("mean_score", "mean score", "pct"),
    ("pass@1", "pass@1", "pct"),
    ("format_rate", "format rate", "pct"),
    ("accuracy", "accuracy (success rate)", "pct"),
    ("mean_variance", "mean reward variance", "num"),
    ("nonzero_variance_fraction", "prompts with nonzero variance", "pct"),
    ("learnable_fraction", "learnable prompts", "pct"),
    ("mean_outcome_entropy", "mean outcome entropy (bits)", "num"),
    ("mean_token_entropy", "mean token entropy (nats/token)", "num"),
    ("mean_response_tokens", "mean response tokens", "len"),
    ("truncated_rate", "truncated (hit max_tokens)", "pct"),
)
PASSK_KEY = re.compile(r"^pass@(\d+)$")
MAJK_KEY = re.compile(r"^maj@(\d+)$")


def _at_k(summary: Summary, pattern: re.Pattern[str]) -> list[str]:
    """The summary's ``pass@k`` (or ``maj@k``) keys, smallest k first."""
    found = [key for key in summary.metrics if pattern.match(key)]
    return sorted(found, key=lambda key: int(key.split("@")[1]))


def report_keys(summary: Summary) -> list[tuple[str, str, str]]:
    at_k = [k for k in _at_k(summary, PASSK_KEY) if k != "pass@1"] + _at_k(summary, MAJK_KEY)
    keys = [row for row in REPORT_METRICS if summary.metrics.get(row[0]) is not None]
    return keys[:2] + [(k, k, "pct") for k in at_k] + keys[2:]


def format_value(value: float, kind: str) -> str:
    if kind == "pct":
        return f"{value:.2%}"
    return f"{value:.1f}" if kind == "len" else f"{value:.4f}"


def format_delta(delta: float, kind: str) -> str:
    if kind == "pct":
        return f"{delta * 100:+.2f} pt"
    return f"{delta:+.1f}" if kind == "len" else f"{delta:+.4f}"


def metric_value(summary: Summary, key: str) -> float:
    value = summary.metrics.get(key)
    if value is None:
        raise EvalError(f"{summary.header.model}: no {key!r} in its summary")
    return value


def summary_markdown(summary: Summary) -> str:
    """What the CLI prints and ``summary.md`` holds."""
    head, sampling = summary.header, summary.header.sampling
    lines = [
        f"# {head.task} {head.command}: {head.model}",
        "",
        f"{head.prompts} prompts from `{head.data}`, backend {head.backend}, "
        f"n={sampling.get('n')}, temperature={sampling.get('temperature')}, "
        f"max_tokens={sampling.get('max_tokens')}, seed={sampling.get('seed')}.",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    lines += [
        f"| {label} | {format_value(metric_value(summary, key), kind)} |"
        for key, label, kind in report_keys(summary)
    ]
    if summary.verdict is not None:
        judged = summary.verdict
        lines += ["", f"**Verdict: {judged.label}.** {judged.advice}", ""]
        lines += [f"- [{'x' if ok else ' '}] {name}" for name, ok in judged.checks.items()]
    if summary.recommendations is not None:
        lines += recommendations_markdown(summary.recommendations)
    return "\n".join(lines) + "\n"


def recommendations_markdown(recommended: Recommendations) -> list[str]:
    """The suggested settings (with the rollout.n table) and the checks, one line each."""
    lines = ["", "## Suggested settings", "", "| setting | now | suggested | why |"]
    lines.append("|---|---|---|---|")
    for item in recommended.settings:
        now = "unset" if item.current is None else str(item.current)
        value = "-" if item.suggested is None else str(item.suggested)
        lines.append(
            f"| `{item.setting}` | {now} ({item.compared_with}) | {value} ({item.action}) | "
            f"{item.reason} |"
        )
    for item in (s for s in recommended.settings if s.table):
        lines += ["", f"Expected share of useful groups by `{item.setting}`:", ""]
        lines += ["| n | " + " | ".join(item.table) + " |", "|---" * (len(item.table) + 1) + "|"]
        lines.append(
            "| useful groups | " + " | ".join(f"{v:.0%}" for v in item.table.values()) + " |"
        )
    lines += ["", "## Checks before a run", ""]
    return lines + [f"- {check.line()}" for check in recommended.checks]


def write_summary(
    folder: Path, summary: Summary, records: Sequence[PassKRecord | AnalyseRecord] | None = None
) -> Summary:
    """``prompts.jsonl`` (passk's and analyse's per-prompt ``records``), then ``summary.json``
    and ``summary.md``: the last files of a run folder."""
    if records is not None:
        write_jsonl(folder / "prompts.jsonl", (record.to_json() for record in records))
    write_json_atomic(folder / "summary.json", summary.to_json())
    write_text_atomic(folder / "summary.md", summary_markdown(summary))
    return summary


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


def log_to_wandb(run_dir: Path, summary: Summary, project: str, max_rows: int = 200) -> str:
    """Log the summary numbers and a table of generations under ``run_dir/wandb``; returns the
    mode (offline unless a key is configured)."""
    import wandb

    # WANDB_MODE when set, else online with an API key and offline without one
    mode = os.environ.get("WANDB_MODE") or (
        "online" if os.environ.get("WANDB_API_KEY") else "offline"
    )
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
    output = Path(output)
    refuse_existing(output, force)
    records, summary = load_prompt_records(run_dir)
    chosen = metrics.high_value_prompts(records, var_min, entropy_min)
    if not chosen:
        raise EvalError(
            f"no prompt of {len(records)} passes variance > {var_min} and entropy >= "
            f"{entropy_min}: nothing to write"
        )
    data = summary.header.data
    frame = read_parquet(Path(data), f"{run_dir}: the analyse run's data")
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

"""The eval and signal-probing engine behind ``scripts/eval_countdown.py`` and ``eval_gsm8k.py``.

A run renders each Parquet prompt exactly as verl's ``RLHFDataset`` does in training (the
tokenizer's chat template over the ``prompt`` messages, ``add_generation_prompt=True``, the same
template kwargs, no extra special tokens), generates with a backend from
``rlvr.evaluation.generation``, and grades every response with the task's reward module and
the training run's reward kwargs.

Each run directory holds ``samples.jsonl`` (appended as batches finish, so an interrupted run
keeps its samples), ``prompts.jsonl`` (per-prompt statistics, sampling commands), and
``summary.json`` / ``summary.md`` written at the end.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.common.files import staged, write_json_atomic
from rlvr.common.paths import ROOT
from rlvr.data.prep import DATA_COLUMNS
from rlvr.evaluation import metrics
from rlvr.evaluation.errors import EvalError
from rlvr.evaluation.generation import Generation, SamplingSettings
from rlvr.tasks import TaskSpec


def experiment_settings(experiment: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Reward kwargs and chat-template kwargs of a composed training experiment."""
    from omegaconf import OmegaConf

    from rlvr.train.config import compose, experiments

    if experiment not in experiments():
        raise EvalError(f"--experiment {experiment!r}: not one of {experiments()}")
    config = compose(experiment)
    reward_kwargs: Any = OmegaConf.to_container(config.custom_reward_function.reward_kwargs)
    template_kwargs: Any = OmegaConf.to_container(
        config.data.get("apply_chat_template_kwargs") or {}
    )
    return dict(reward_kwargs), dict(template_kwargs)


# ---------------------------------------------------------------- prompts


def load_rows(data_path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The first ``limit`` rows of a data-prep Parquet, checked for verl's columns."""
    import pandas as pd

    path = Path(data_path)
    if not path.is_file():
        raise EvalError(f"--data {path}: no such file (create it with the task's data prep script)")
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:
        raise EvalError(f"--data {path}: not a readable Parquet file ({exc})") from exc
    missing = [c for c in DATA_COLUMNS if c not in frame.columns]
    if missing:
        raise EvalError(f"--data {path}: missing column(s) {missing}; expected verl's schema")
    if frame.empty:
        raise EvalError(f"--data {path}: no rows")
    rows = frame.head(limit).to_dict("records") if limit else frame.to_dict("records")
    for index, row in enumerate(rows):
        if not isinstance(row["reward_model"], dict) or "ground_truth" not in row["reward_model"]:
            raise EvalError(f"--data {path}: row {index}: reward_model has no ground_truth")
        row["_index"] = index
    return rows


def render_prompt(
    tokenizer: Any, messages: Sequence[dict[str, str]], **template_kwargs: Any
) -> list[int]:
    """Token ids of a prompt exactly as verl's RLHFDataset builds them."""
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=True, tokenize=False, **template_kwargs
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _jsonable(value: Any) -> Any:
    """Parquet hands back numpy arrays and scalars; JSON wants lists and plain numbers."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


# ---------------------------------------------------------------- runs


@dataclass
class EvalRun:
    """One eval run: the model, the data, how to grade, and where the results go."""

    task: TaskSpec
    model_path: str
    data_path: str
    output_dir: Path
    backend: Any  # rlvr.evaluation.generation.Backend
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    prompts_per_chunk: int = 16
    progress: bool = True

    def sample_and_grade(
        self, rows: list[dict[str, Any]], sampling: SamplingSettings
    ) -> list[list[dict[str, Any]]]:
        """Generate ``sampling.n`` responses per row and grade each one.

        Every graded sample is appended to ``samples.jsonl`` as its chunk finishes.
        """
        from tqdm import tqdm

        tokenizer = self.backend.tokenizer
        compute_score = self.task.load_reward()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        graded: list[list[dict[str, Any]]] = []
        bar = tqdm(
            total=len(rows),
            desc=f"{self.task.name} n={sampling.n}",
            unit="prompt",
            disable=not self.progress,
            file=sys.stderr,
        )
        with open(self.output_dir / "samples.jsonl", "w") as samples_file:
            for start in range(0, len(rows), self.prompts_per_chunk):
                chunk = rows[start : start + self.prompts_per_chunk]
                prompts = [
                    render_prompt(tokenizer, row["prompt"], **self.template_kwargs) for row in chunk
                ]
                chunk_seed = SamplingSettings(
                    **{**sampling.__dict__, "seed": sampling.seed + start}
                )
                generations = self.backend.generate(prompts, chunk_seed)
                for row, prompt_ids, group in zip(chunk, prompts, generations, strict=True):
                    records = [
                        self._grade(compute_score, row, len(prompt_ids), k, generation)
                        for k, generation in enumerate(group)
                    ]
                    for record in records:  # logprobs stay in memory: they are long
                        kept = {k: v for k, v in record.items() if k != "logprobs"}
                        samples_file.write(json.dumps(kept) + "\n")
                    graded.append(records)
                samples_file.flush()
                bar.update(len(chunk))
        bar.close()
        return graded

    def _grade(
        self,
        compute_score: Callable[..., dict[str, Any]],
        row: dict[str, Any],
        prompt_tokens: int,
        sample: int,
        generation: Generation,
    ) -> dict[str, Any]:
        ground_truth = row["reward_model"]["ground_truth"]
        parts = compute_score(
            row["data_source"],
            generation.text,
            ground_truth,
            _jsonable(row.get("extra_info")),
            **self.reward_kwargs,
        )
        logprobs = generation.logprobs
        return {
            "prompt_index": row["_index"],
            "sample": sample,
            "ground_truth": _jsonable(ground_truth),
            "prompt_tokens": prompt_tokens,
            "response": generation.text,
            "response_tokens": generation.num_tokens,
            "finish_reason": generation.finish_reason,
            "mean_neg_logprob": -sum(logprobs) / len(logprobs) if logprobs else None,
            "logprobs": logprobs,
            **{key: _jsonable(value) for key, value in parts.items()},
        }

    def header(self, command: str, sampling: SamplingSettings, prompts: int) -> dict[str, Any]:
        return {
            "command": command,
            "task": self.task.name,
            "model": self.model_path,
            "data": str(Path(self.data_path).resolve()),
            "prompts": prompts,
            "backend": self.backend.name,
            "sampling": dict(sampling.__dict__),
            "reward_kwargs": self.reward_kwargs,
            "template_kwargs": self.template_kwargs,
        }


def response_summary(graded: list[list[dict[str, Any]]]) -> dict[str, float]:
    """Sample-level means: score, pass@1 (score == 1.0), format, length, truncation."""
    samples = [s for group in graded for s in group]
    return {
        "mean_score": metrics.mean([s["score"] for s in samples]),
        "pass@1": metrics.mean([float(metrics.is_success(s["score"])) for s in samples]),
        "format_rate": metrics.mean([float(s.get("format", 0.0)) for s in samples]),
        "mean_response_tokens": metrics.mean([s["response_tokens"] for s in samples]),
        "truncated_rate": metrics.mean([float(s["finish_reason"] == "length") for s in samples]),
    }


def run_reward(run: EvalRun, rows: list[dict[str, Any]], sampling: SamplingSettings) -> dict:
    """Greedy decoding, one response per prompt."""
    sampling = SamplingSettings(**{**sampling.__dict__, "n": 1, "temperature": 0.0})
    graded = run.sample_and_grade(rows, sampling)
    summary = {**run.header("reward", sampling, len(rows)), **response_summary(graded)}
    return finish_run(run, summary)


def run_passk(
    run: EvalRun, rows: list[dict[str, Any]], sampling: SamplingSettings, ks: Sequence[int]
) -> dict:
    """n samples per prompt; the unbiased pass@k for each k."""
    bad = [k for k in ks if not 1 <= k <= sampling.n]
    if bad:
        raise EvalError(f"--k {bad}: every k must be between 1 and --n {sampling.n}")
    graded = run.sample_and_grade(rows, sampling)
    successes = [sum(metrics.is_success(s["score"]) for s in group) for group in graded]
    _write_prompt_records(
        run,
        [
            {
                "prompt_index": group[0]["prompt_index"],
                "ground_truth": group[0]["ground_truth"],
                "n": sampling.n,
                "successes": c,
                **{f"pass@{k}": metrics.pass_at_k(sampling.n, c, k) for k in ks},
            }
            for group, c in zip(graded, successes, strict=True)
        ],
    )
    summary = {
        **run.header("passk", sampling, len(rows)),
        **response_summary(graded),
        **metrics.passk_summary(successes, sampling.n, ks),
    }
    return finish_run(run, summary)


def run_analyse(run: EvalRun, rows: list[dict[str, Any]], sampling: SamplingSettings) -> dict:
    """n samples per prompt at a training-like temperature: is there a GRPO signal here?"""
    if sampling.n < 2:
        raise EvalError("--rollout_n must be at least 2: variance needs a group")
    graded = run.sample_and_grade(rows, sampling)
    stats = [
        metrics.prompt_stats(
            group[0]["prompt_index"], [s["score"] for s in group], [s["logprobs"] for s in group]
        )
        for group in graded
    ]
    _write_prompt_records(
        run,
        [
            {**s.as_dict(), "ground_truth": group[0]["ground_truth"]}
            for s, group in zip(stats, graded, strict=True)
        ],
    )
    overall = metrics.analyse_summary(stats)
    judged = metrics.verdict(
        overall["accuracy"], overall["mean_variance"], overall["mean_outcome_entropy"]
    )
    summary = {
        **run.header("analyse", sampling, len(rows)),
        **response_summary(graded),
        **overall,
        "verdict": judged.label,
        "advice": judged.advice,
        "checks": judged.checks,
    }
    return finish_run(run, summary)


def _write_prompt_records(run: EvalRun, records: list[dict[str, Any]]) -> None:
    with open(run.output_dir / "prompts.jsonl", "w") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def finish_run(run: EvalRun, summary: dict[str, Any]) -> dict[str, Any]:
    write_json_atomic(run.output_dir / "summary.json", summary)
    (run.output_dir / "summary.md").write_text(summary_markdown(summary))
    return summary


# ---------------------------------------------------------------- reports

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


def _report_keys(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    passk = sorted(
        (k for k in summary if PASSK_KEY.match(k) and k != "pass@1"),
        key=lambda k: int(k.split("@")[1]),
    )
    keys = [row for row in REPORT_METRICS if summary.get(row[0]) is not None]
    return keys[:2] + [(k, k, "pct") for k in passk] + keys[2:]


def _format(value: float, kind: str) -> str:
    if kind == "pct":
        return f"{value:.2%}"
    return f"{value:.1f}" if kind == "len" else f"{value:.4f}"


def _format_delta(delta: float, kind: str) -> str:
    if kind == "pct":
        return f"{delta * 100:+.2f} pt"
    return f"{delta:+.1f}" if kind == "len" else f"{delta:+.4f}"


def summary_markdown(summary: dict[str, Any]) -> str:
    sampling = summary["sampling"]
    lines = [
        f"# {summary['task']} {summary['command']}: {summary['model']}",
        "",
        f"{summary['prompts']} prompts from `{summary['data']}`, backend {summary['backend']}, "
        f"n={sampling['n']}, temperature={sampling['temperature']}, "
        f"max_tokens={sampling['max_tokens']}, seed={sampling['seed']}.",
        "",
        "| metric | value |",
        "|---|---|",
    ]
    lines += [
        f"| {label} | {_format(float(summary[key]), kind)} |"
        for key, label, kind in _report_keys(summary)
    ]
    if "verdict" in summary:
        lines += ["", f"**Verdict: {summary['verdict']}.** {summary['advice']}", ""]
        lines += [f"- [{'x' if ok else ' '}] {name}" for name, ok in summary["checks"].items()]
    return "\n".join(lines) + "\n"


def load_summary(path: str | Path) -> dict[str, Any]:
    """A run's summary, from its directory or its ``summary.json``."""
    path = Path(path)
    file = path / "summary.json" if path.is_dir() else path
    if not file.is_file():
        raise EvalError(f"{path}: no summary.json (is it an eval run directory?)")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise EvalError(f"{file}: not valid JSON ({exc})") from exc


def compare_markdown(
    base: dict[str, Any], trained: dict[str, Any], names: tuple[str, str] = ("base", "trained")
) -> str:
    """A side-by-side "Base -> Trained" Markdown table of two summaries, with deltas."""
    keys = [row for row in _report_keys(base) if trained.get(row[0]) is not None]
    if not keys:
        raise EvalError("the two summaries share no metrics")
    lines = [
        f"| metric | {names[0]} | {names[1]} | delta |",
        "|---|---|---|---|",
    ]
    for key, label, kind in keys:
        b, t = float(base[key]), float(trained[key])
        lines.append(
            f"| {label} | {_format(b, kind)} | {_format(t, kind)} | {_format_delta(t - b, kind)} |"
        )
    notes = [
        f"{names[0]}: {base.get('model')} ({base.get('command')}, {base.get('prompts')} prompts)",
        f"{names[1]}: {trained.get('model')} ({trained.get('command')}, "
        f"{trained.get('prompts')} prompts)",
    ]
    if base.get("data") != trained.get("data") or base.get("prompts") != trained.get("prompts"):
        notes.append("warning: the two runs did not use the same prompts")
    return "\n".join([*lines, "", *notes]) + "\n"


# ---------------------------------------------------------------- stats and filter


def load_prompt_records(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """An analyse run's per-prompt records and its summary."""
    path = Path(path)
    run_dir = path if path.is_dir() else path.parent
    summary = load_summary(run_dir)
    if summary.get("command") != "analyse":
        raise EvalError(f"{run_dir}: an {summary.get('command')!r} run; stats/filter read analyse")
    records_file = run_dir / "prompts.jsonl"
    if not records_file.is_file():
        raise EvalError(f"{run_dir}: no prompts.jsonl")
    records = [json.loads(line) for line in records_file.read_text().splitlines() if line]
    return records, summary


def high_value_prompts(
    records: list[dict[str, Any]], var_min: float, entropy_min: float
) -> list[dict[str, Any]]:
    """The learnable prompts, most informative (highest variance) first."""
    chosen = [r for r in records if metrics.is_learnable(r, var_min, entropy_min)]
    return sorted(chosen, key=lambda r: (-r["variance"], r["prompt_index"]))


def stats_markdown(
    records: list[dict[str, Any]],
    chosen: list[dict[str, Any]],
    var_min: float,
    entropy_min: float,
    top: int,
) -> str:
    share = len(chosen) / len(records) if records else 0.0
    lines = [
        f"{len(chosen)} of {len(records)} prompts ({share:.1%}) have variance > {var_min} and "
        f"outcome entropy >= {entropy_min}.",
        "",
        "| prompt | success rate | mean score | variance | outcome entropy | token entropy |",
        "|---|---|---|---|---|---|",
    ]
    for r in chosen[:top]:
        token = "-" if r.get("token_entropy") is None else f"{r['token_entropy']:.3f}"
        lines.append(
            f"| {r['prompt_index']} | {r['success_rate']:.2%} | {r['mean_score']:.3f} | "
            f"{r['variance']:.4f} | {r['outcome_entropy']:.3f} | {token} |"
        )
    if len(chosen) > top:
        lines.append(f"| ... {len(chosen) - top} more | | | | | |")
    return "\n".join(lines) + "\n"


def filter_learnable(
    run_dir: str | Path, output: str | Path, var_min: float, entropy_min: float
) -> tuple[int, int]:
    """Write the analyse run's learnable prompts, as their original Parquet rows, to ``output``.

    Returns (rows written, prompts analysed). The run's ground truths are checked against the
    data file so a regenerated data file cannot silently select the wrong rows.
    """
    import pandas as pd

    records, summary = load_prompt_records(run_dir)
    chosen = high_value_prompts(records, var_min, entropy_min)
    if not chosen:
        raise EvalError(
            f"no prompt of {len(records)} passes variance > {var_min} and entropy >= "
            f"{entropy_min}: nothing to write"
        )
    frame = pd.read_parquet(summary["data"])
    indices = sorted(r["prompt_index"] for r in chosen)
    by_index = {r["prompt_index"]: r for r in chosen}
    for index in indices:
        if index >= len(frame):
            raise EvalError(f"{summary['data']} has {len(frame)} rows; the run saw row {index}")
        actual = _jsonable(frame.iloc[index]["reward_model"]["ground_truth"])
        if actual != by_index[index]["ground_truth"]:
            raise EvalError(
                f"{summary['data']} row {index}: ground truth {actual!r} differs from the run's "
                f"{by_index[index]['ground_truth']!r}; the data file changed since the analyse run"
            )
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with staged(output) as staging:
        frame.iloc[indices].reset_index(drop=True).to_parquet(staging, index=False)
    return len(indices), len(records)


# ---------------------------------------------------------------- wandb


def log_to_wandb(run: EvalRun, summary: dict[str, Any], project: str, max_rows: int = 200) -> str:
    """Log the summary numbers and a table of generations; offline unless a key is configured."""
    import wandb

    mode: Any = os.environ.get("WANDB_MODE") or (  # wandb checks the value itself
        "online" if os.environ.get("WANDB_API_KEY") else "offline"
    )
    name = run.output_dir.name
    wb = wandb.init(
        project=project,
        name=name,
        group=f"eval-{summary['task']}",
        job_type=f"eval-{summary['command']}",
        config={k: v for k, v in summary.items() if not isinstance(v, float | int)},
        dir=str(run.output_dir),
        mode=mode,
        reinit="finish_previous",
    )
    wb.summary.update({k: v for k, v in summary.items() if isinstance(v, float | int)})
    table = wandb.Table(columns=["prompt_index", "sample", "response", "score", "finish_reason"])
    with open(run.output_dir / "samples.jsonl") as handle:
        for line_number, line in enumerate(handle):
            if line_number >= max_rows:
                break
            s = json.loads(line)
            table.add_data(
                s["prompt_index"], s["sample"], s["response"], s["score"], s["finish_reason"]
            )
    wb.log({"generations": table})
    wb.finish()
    return mode


def default_output_dir(task: str, command: str, model_path: str) -> Path:
    """``artifacts/eval/<task>_<command>_<model>``, the model named by its distinctive parts."""
    parts = [p for p in Path(model_path).parts if p not in ("actor", "huggingface", "/")]
    slug = "-".join(parts[-2:]) if parts else "model"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", slug).strip("_.") or "model"
    return ROOT / "artifacts" / "eval" / f"{task}_{command}_{slug}"

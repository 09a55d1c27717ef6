"""The eval and signal-probing engine behind ``scripts/eval_countdown.py`` and ``eval_gsm8k.py``.

A run renders each Parquet prompt exactly as verl's ``RLHFDataset`` does in training (the
tokenizer's chat template over the ``prompt`` messages, ``add_generation_prompt=True``, the same
template kwargs, no extra special tokens), generates with a backend from
``rlvr.evaluation.generation``, and grades every response with the task's reward module and
the training run's reward kwargs.

Each command (``run_reward``, ``run_passk``, ``run_analyse``) writes its run folder in a staging
folder beside ``output_dir`` and moves it into place whole at the end (``outputs.py``):
``samples.jsonl`` (appended as batches finish), ``prompts.jsonl`` (per-prompt records, sampling
commands), ``summary.json`` / ``summary.md``. The records are typed in ``records.py``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rlvr.common.files import write_json_atomic, write_text_atomic
from rlvr.common.messages import first_line
from rlvr.data.prep import DATA_COLUMNS
from rlvr.evaluation import metrics, model_checks, recommend
from rlvr.evaluation.comparable import fingerprints
from rlvr.evaluation.errors import EvalError
from rlvr.evaluation.generation import Backend, Generation, SamplingSettings
from rlvr.evaluation.outputs import staged_run_dir
from rlvr.evaluation.records import (
    ANSWER_KEY,
    AnalyseRecord,
    GradedSample,
    JSONDict,
    PassKRecord,
    Recommendations,
    RunHeader,
    Summary,
    jsonable,
    write_jsonl,
)
from rlvr.evaluation.reports import summary_markdown
from rlvr.evaluation.settings import RunSettings, check_reward_kwargs
from rlvr.tasks import TaskSpec

Row = dict[str, Any]  # one data-prep Parquet row as pandas hands it back, plus "_index"
RewardFunction = Callable[..., object]


@dataclass(frozen=True)
class Grader:
    """The reward file's functions: ``compute_score`` and, when it has one, ``answer_key``."""

    compute_score: RewardFunction
    answer_key: Callable[..., object] | None = None


# ---------------------------------------------------------------- prompts

PARQUET_MAGIC = b"PAR1"


def _parquet_frame(path: Path) -> Any:
    """The file as a DataFrame; one-line errors for a folder, a non-Parquet or unreadable file."""
    import pandas as pd

    if path.is_dir():
        raise EvalError(f"--data {path}: is a folder; pass a .parquet file written by data prep")
    if not path.exists():
        raise EvalError(f"--data {path}: no such file (create it with the task's data prep script)")
    if not path.is_file():  # a FIFO, socket or device: reading it could block or never end
        raise EvalError(
            f"--data {path}: not a regular file; pass the .parquet written by data prep"
        )
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic != PARQUET_MAGIC:
        raise EvalError(
            f"--data {path}: not a Parquet file; pass the .parquet written by the task's data "
            "prep script"
        )
    try:
        return pd.read_parquet(path)
    except Exception as exc:
        raise EvalError(f"--data {path}: not a readable Parquet file ({first_line(exc)})") from exc


def load_rows(
    data_path: str | Path, limit: int | None = None, task: TaskSpec | None = None
) -> list[Row]:
    """The first ``limit`` rows of a data-prep Parquet, checked for verl's columns and, given a
    task, for rows of that task (another task's rows would all score 0, silently)."""
    path = Path(data_path)
    frame = _parquet_frame(path)
    missing = [c for c in DATA_COLUMNS if c not in frame.columns]
    if missing:
        raise EvalError(f"--data {path}: missing column(s) {missing}; expected verl's schema")
    if frame.empty:
        raise EvalError(f"--data {path}: no rows")
    if task is not None:
        sources = sorted({str(s) for s in frame["data_source"]})
        if sources != [task.data_source]:
            raise EvalError(
                f"--data {path}: holds data_source {sources}, but the {task.name} reward grades "
                f"{task.data_source!r} rows; pass {task.name} data (create it with: "
                f"{task.prep_command})"
            )
    rows: list[Row] = (frame.head(limit) if limit else frame).to_dict("records")
    for index, row in enumerate(rows):
        if not isinstance(row["reward_model"], dict) or "ground_truth" not in row["reward_model"]:
            raise EvalError(f"--data {path}: row {index}: reward_model has no ground_truth")
        problem = prompt_problem(row["prompt"])
        if problem:
            raise EvalError(
                f"--data {path}: row {index}: prompt {problem}; expected chat messages, "
                '[{"role": "user", "content": "..."}], as data prep writes them'
            )
        row["_index"] = index
    return rows


def prompt_problem(prompt: object) -> str | None:
    """Why ``prompt`` is not a list of chat messages the chat template can render, or None.
    Parquet list columns come back from pandas as numpy arrays."""
    if isinstance(prompt, (str, bytes, dict)) or not hasattr(prompt, "__iter__"):
        return f"is a {type(prompt).__name__}, not a list of messages"
    messages = list(prompt)
    if not messages:
        return "has no messages"
    for number, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"message {number} is a {type(message).__name__}, not an object"
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                return f"message {number} has no {key} string"
    return None


def render_prompt(
    tokenizer: Any, messages: Sequence[dict[str, str]], **template_kwargs: Any
) -> list[int]:
    """Token ids of a prompt exactly as verl's RLHFDataset builds them."""
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=True, tokenize=False, **template_kwargs
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def tokenizer_of(backend: Backend) -> Any:
    """The tokenizer a backend decodes with; prompts are rendered with the same one."""
    tokenizer = getattr(backend, "tokenizer", None)  # every backend has one; Backend omits it
    if tokenizer is None:
        raise EvalError(f"backend {backend.name}: no tokenizer to render prompts with")
    return tokenizer


# ---------------------------------------------------------------- runs


@dataclass
class EvalRun:
    """One eval run: the model, the data, how to grade, and where the results go."""

    task: TaskSpec
    model_path: str
    data_path: str
    output_dir: Path  # the run folder; written whole at the end, see outputs.staged_run_dir
    backend: Backend
    reward_kwargs: JSONDict = field(default_factory=dict)
    template_kwargs: JSONDict = field(default_factory=dict)
    prompts_per_chunk: int = 16
    progress: bool = True
    force: bool = False  # replace an existing output_dir (once the run has completed)
    training: RunSettings | None = None  # what analyse's suggestions are compared with
    generation_eos: list[int] | None = None  # generation_config.json's eos ids; None: no file
    generation_seconds: float = 0.0  # sample_and_grade's wall time: the summary's "timing"

    def sample_and_grade(
        self, rows: Sequence[Row], sampling: SamplingSettings, folder: Path
    ) -> list[list[GradedSample]]:
        """Generate ``sampling.n`` responses per row and grade each one, appending each chunk's
        samples to ``folder/samples.jsonl`` (a new file) as it finishes; the wall time of it all
        (generating, grading, writing) is kept in ``generation_seconds``."""
        from tqdm import tqdm

        check_reward_kwargs(self.task, self.reward_kwargs, "reward kwargs")  # before any decoding
        model_checks.require_chat_template(tokenizer_of(self.backend), self.template_kwargs)
        grader = Grader(self.task.load_reward(), self.task.load_answer_key())
        graded: list[list[GradedSample]] = []
        started = time.perf_counter()
        with (
            open(folder / "samples.jsonl", "x") as samples_file,
            tqdm(
                total=len(rows),
                desc=f"{self.task.name} n={sampling.n}",
                unit="prompt",
                disable=not self.progress,
                file=sys.stderr,
            ) as bar,
        ):
            for start in range(0, len(rows), self.prompts_per_chunk):
                chunk = rows[start : start + self.prompts_per_chunk]
                chunk_sampling = replace(sampling, seed=sampling.seed + start)
                groups = self._grade_chunk(grader, chunk, chunk_sampling)
                for sample in (s for group in groups for s in group):
                    samples_file.write(json.dumps(sample.to_json()) + "\n")
                samples_file.flush()
                graded += groups
                bar.update(len(chunk))
        self.generation_seconds = time.perf_counter() - started
        return graded

    def _grade_chunk(
        self, grader: Grader, chunk: Sequence[Row], sampling: SamplingSettings
    ) -> list[list[GradedSample]]:
        tokenizer = tokenizer_of(self.backend)
        prompts = [render_prompt(tokenizer, row["prompt"], **self.template_kwargs) for row in chunk]
        generations = self.backend.generate(prompts, sampling)
        return [
            [self._grade(grader, row, len(ids), k, g) for k, g in enumerate(group)]
            for row, ids, group in zip(chunk, prompts, generations, strict=True)
        ]

    def _grade(
        self,
        grader: Grader,
        row: Row,
        prompt_tokens: int,
        sample: int,
        generation: Generation,
    ) -> GradedSample:
        ground_truth = row["reward_model"]["ground_truth"]
        result = grader.compute_score(
            row["data_source"],
            generation.text,
            ground_truth,
            jsonable(row.get("extra_info")),
            **self.reward_kwargs,
        )
        parts = result if isinstance(result, dict) else {"score": result}  # verl allows a float
        if grader.answer_key is not None:
            key = grader.answer_key(generation.text, ground_truth, **self.reward_kwargs)
            parts = {**parts, ANSWER_KEY: None if key is None else str(key)}
        logprobs = list(generation.logprobs)
        return GradedSample(
            prompt_index=row["_index"],
            sample=sample,
            ground_truth=jsonable(ground_truth),
            prompt_tokens=prompt_tokens,
            response=generation.text,
            response_tokens=generation.num_tokens,
            finish_reason=generation.finish_reason,
            mean_neg_logprob=-sum(logprobs) / len(logprobs) if logprobs else None,
            parts={str(key): jsonable(value) for key, value in parts.items()},
            logprobs=logprobs,
            token_ids=list(generation.token_ids),
        )

    def header(self, command: str, sampling: SamplingSettings, rows: Sequence[Row]) -> RunHeader:
        tokenizer = tokenizer_of(self.backend)  # rendered again: cheap beside generation
        rendered = [render_prompt(tokenizer, r["prompt"], **self.template_kwargs) for r in rows]
        return RunHeader(
            command=command,
            task=self.task.name,
            model=self.model_path,
            data=str(Path(self.data_path).resolve()),
            prompts=len(rows),
            backend=self.backend.name,
            sampling={key: jsonable(value) for key, value in asdict(sampling).items()},
            reward_kwargs=dict(self.reward_kwargs),
            template_kwargs=dict(self.template_kwargs),
            **fingerprints(rows, rendered),
        )


def response_summary(graded: Sequence[Sequence[GradedSample]]) -> dict[str, float | None]:
    """Sample-level means: score, pass@1 (score == 1.0), format, length, truncation."""
    samples = [s for group in graded for s in group]
    return {
        "mean_score": metrics.mean([s.score for s in samples]),
        "pass@1": metrics.mean([float(metrics.is_success(s.score)) for s in samples]),
        "format_rate": metrics.mean([s.format for s in samples]),
        "mean_response_tokens": metrics.mean([s.response_tokens for s in samples]),
        "truncated_rate": metrics.mean([float(s.finish_reason == "length") for s in samples]),
    }


def default_ks(n: int) -> list[int]:
    """1, 4, 8, 16 up to n, and n."""
    return sorted({k for k in (1, 4, 8, 16) if k <= n} | {n})


def check_passk(n: int, ks: Sequence[int]) -> None:
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise EvalError(f"--k {bad}: every k must be between 1 and --n {n}")


def check_analyse(n: int) -> None:
    if n < 2:
        raise EvalError("--n (or --rollout_n) must be at least 2: variance needs a group")


def write_summary(folder: Path, summary: Summary) -> Summary:
    write_json_atomic(folder / "summary.json", summary.to_json())
    write_text_atomic(folder / "summary.md", summary_markdown(summary))
    return summary


def run_reward(run: EvalRun, rows: Sequence[Row], sampling: SamplingSettings) -> Summary:
    """Greedy decoding, one response per prompt."""
    sampling = replace(sampling, n=1, temperature=0.0)
    with staged_run_dir(run.output_dir, run.force) as folder:
        graded = run.sample_and_grade(rows, sampling, folder)
        summary = Summary(run.header("reward", sampling, rows), response_summary(graded))
        summary = write_summary(folder, summary.timed(run.generation_seconds, graded))
    return summary


def run_passk(
    run: EvalRun, rows: Sequence[Row], sampling: SamplingSettings, ks: Sequence[int]
) -> Summary:
    """n samples per prompt; the unbiased pass@k for each k, and maj@k when the reward file
    names each response's answer (``answer_key``)."""
    # verl's validation reports mean@N/best@N/maj@N too (verl/trainer/ppo/metric_utils.py,
    # process_validation_metrics), but inside the trainer only: this runs on a saved checkpoint
    # outside it, keeps per-prompt records, and feeds paired confidence intervals (paired.py).
    n = sampling.n
    check_passk(n, ks)
    voting = run.task.load_answer_key() is not None
    with staged_run_dir(run.output_dir, run.force) as folder:
        graded = run.sample_and_grade(rows, sampling, folder)
        successes = [sum(metrics.is_success(s.score) for s in group) for group in graded]
        votes = [[(s.answer_key, metrics.is_success(s.score)) for s in group] for group in graded]
        maj_at = [{k: metrics.maj_at_k(v, k) for k in ks} if voting else {} for v in votes]
        records = [
            PassKRecord(
                prompt_index=group[0].prompt_index,
                ground_truth=group[0].ground_truth,
                n=n,
                successes=c,
                pass_at={k: metrics.pass_at_k(n, c, k) for k in ks},
                maj_at=majority,
            )
            for group, c, majority in zip(graded, successes, maj_at, strict=True)
        ]
        write_jsonl(folder / "prompts.jsonl", (r.to_json() for r in records))
        majk = {f"maj@{k}": metrics.mean([m[k] for m in maj_at]) for k in ks} if voting else {}
        summary = Summary(
            run.header("passk", sampling, rows),
            {**response_summary(graded), **metrics.passk_summary(successes, n, ks), **majk},
        )
        summary = write_summary(folder, summary.timed(run.generation_seconds, graded))
    return summary


def run_analyse(run: EvalRun, rows: Sequence[Row], sampling: SamplingSettings) -> Summary:
    """n samples per prompt at a training-like temperature: is there a GRPO signal here?"""
    check_analyse(sampling.n)
    with staged_run_dir(run.output_dir, run.force) as folder:
        graded = run.sample_and_grade(rows, sampling, folder)
        records = [
            AnalyseRecord.of(
                metrics.prompt_stats(
                    group[0].prompt_index, [s.score for s in group], [s.logprobs for s in group]
                ),
                group[0].ground_truth,
            )
            for group in graded
        ]
        write_jsonl(folder / "prompts.jsonl", (r.to_json() for r in records))
        overall = metrics.analyse_summary(records)
        accuracy, variance, entropy = (
            overall[key] or 0.0 for key in ("accuracy", "mean_variance", "mean_outcome_entropy")
        )
        summary = Summary(
            run.header("analyse", sampling, rows),
            {**response_summary(graded), **overall},
            verdict=metrics.verdict(
                accuracy, variance, entropy, overall["nonzero_variance_fraction"] or 0.0
            ),
            recommendations=Recommendations(
                settings=recommend.suggested_settings(
                    graded, records, sampling.max_tokens, run.training
                ),
                checks=model_checks.model_checks(
                    tokenizer_of(run.backend),
                    run.template_kwargs,
                    run.generation_eos,
                    graded,
                    sampling.max_tokens,
                ),
            ),
        )
        summary = write_summary(folder, summary.timed(run.generation_seconds, graded))
    return summary

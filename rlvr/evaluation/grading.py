"""The grading stage: each prompt's responses generated (the backend of ``generation.py``) and
graded with the task's reward module and the training run's reward kwargs, each chunk's samples
appended to ``samples.jsonl`` as it finishes."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from rlvr.evaluation.generation import Backend, Generation
from rlvr.evaluation.model import model_checks, require_chat_template
from rlvr.evaluation.prompts import Row, fingerprints, render_prompt, tokenizer_of
from rlvr.evaluation.records import (
    ANSWER_KEY,
    CheckLine,
    GradedSample,
    JSONDict,
    RunHeader,
    jsonable,
)
from rlvr.evaluation.settings import RunSettings, SamplingSettings
from rlvr.tasks import TaskSpec

RewardFunction = Callable[..., object]


@dataclass(frozen=True)
class Grader:
    """The reward file's functions: ``compute_score`` and, when it has one, ``answer_key``."""

    compute_score: RewardFunction
    answer_key: Callable[..., object] | None = None


@dataclass
class EvalRun:
    """One eval run: the model, the data, how to grade, and where the results go."""

    task: TaskSpec
    model_path: str
    data_path: str
    output_dir: Path  # the run folder; written whole at the end, see run_folder.staged_run_dir
    backend: Backend
    reward_kwargs: JSONDict = field(default_factory=dict)
    template_kwargs: JSONDict = field(default_factory=dict)
    prompts_per_chunk: int = 16
    progress: bool = True
    force: bool = False  # replace an existing output_dir (once the run has completed)
    training: RunSettings | None = None  # what analyse's suggestions are compared with
    generation_eos: list[int] | None = None  # generation_config.json's eos ids; None: no file
    generation_seconds: float = 0.0  # sample_and_grade's wall time: the summary's "timing"
    # The prompt ids sample_and_grade sent, for the header's fingerprint; each run renders its own.
    rendered: list[list[int]] = field(default_factory=list, init=False, repr=False)

    def sample_and_grade(
        self, rows: Sequence[Row], sampling: SamplingSettings, folder: Path
    ) -> list[list[GradedSample]]:
        """Generate ``sampling.n`` responses per row and grade each one, appending each chunk's
        samples to ``folder/samples.jsonl`` (a new file) as it finishes; the wall time of it all
        (generating, grading, writing) is kept in ``generation_seconds``."""
        from tqdm import tqdm

        tokenizer = tokenizer_of(self.backend)
        require_chat_template(tokenizer, self.template_kwargs)
        grader = Grader(self.task.load_reward(), self.task.load_answer_key())
        graded: list[list[GradedSample]] = []
        started = time.perf_counter()
        self.rendered = [
            render_prompt(tokenizer, r["prompt"], **self.template_kwargs) for r in rows
        ]
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
                end = start + self.prompts_per_chunk
                chunk_sampling = replace(sampling, seed=sampling.seed + start)
                groups = self._grade_chunk(
                    grader, rows[start:end], self.rendered[start:end], chunk_sampling
                )
                for sample in (s for group in groups for s in group):
                    samples_file.write(json.dumps(sample.to_json()) + "\n")
                samples_file.flush()
                graded += groups
                bar.update(len(groups))
        self.generation_seconds = time.perf_counter() - started
        return graded

    def _grade_chunk(
        self,
        grader: Grader,
        chunk: Sequence[Row],
        prompts: list[list[int]],
        sampling: SamplingSettings,
    ) -> list[list[GradedSample]]:
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
        """The run's settings and fingerprints, of the prompts as ``sample_and_grade`` sent them."""
        if len(self.rendered) != len(rows):
            raise ValueError("EvalRun.header: call sample_and_grade on these rows first")
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
            dtype=getattr(self.backend, "dtype", None),
            batch_size=getattr(self.backend, "batch_size", None),
            **fingerprints(rows, self.rendered),
        )

    def model_checks(self, graded: Sequence[Sequence[GradedSample]], cap: int) -> list[CheckLine]:
        """analyse's checks of the loaded model's chat template and stop tokens against its
        samples (``model.model_checks``)."""
        tokenizer = tokenizer_of(self.backend)
        return model_checks(tokenizer, self.template_kwargs, self.generation_eos, graded, cap)

"""The GRPO loop of TuFT's Countdown RL guide through the Tinker API, one step at a time:

    sample G responses for each of B prompts (the server samples; the sampler returns each
    token's log prob) -> grade them with the task's reward -> verl's GRPO advantages within each
    group, zero-spread groups dropped -> one Datum per kept response (rlvr.tinker.datums) ->
    forward_backward(datums, "importance_sampling") + optim_step(Adam at the recipe's lr)

With ``tinker.sample_ahead`` the next batch is sampled while this one trains, from the weights one
step old (the importance ratio's denominator is the sampler's log prob, so the lag is corrected);
without it, every batch is sampled from the newest weights. Each step logs verl's metric names
through verl's own loggers (rlvr.tinker.tracking: metrics.jsonl, WandB, the console, as
``trainer.logger`` says; each validation's samples as WandB's ``val/generations`` table) and its
responses to rollouts/<step>.jsonl; every ``trainer.save_freq`` steps and at the end the state
is saved on the server and recorded (rlvr.tinker.run_folder), which a run started again resumes
from.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from rlvr.tinker.datums import Sample, build_datums, to_datum
from rlvr.tinker.problems import Grader, Problem, batch_rows, mean
from rlvr.tinker.recipe import TinkerRecipe
from rlvr.tinker.run_folder import Checkpoint, dump_rollouts, record_checkpoint
from rlvr.tinker.service import explain, retried
from rlvr.tinker.tracking import RunLog


@dataclass
class Graded:
    """One group: a prompt's sampled responses and their grades."""

    problem: Problem
    samples: list[Sample]
    rows: list[dict[str, Any]]  # the rollout-dump lines
    rewards: list[dict[str, Any]]  # each response's reward: its score and the reward's extras


class TinkerLoop:
    def __init__(
        self,
        recipe: TinkerRecipe,
        training: Any,
        tokenizer: Any,
        grade: Grader,
        train: Sequence[Problem],
        val: Sequence[Problem],
        log: RunLog,
    ) -> None:
        self.recipe, self.training, self.tokenizer, self.grade = recipe, training, tokenizer, grade
        self.train, self.val, self.log = train, val, log

    # ---- calls to the server -------------------------------------------------------------
    def _retried(self, call: Any, doing: str) -> Any:
        r = self.recipe
        return retried(call, doing, r.max_retries + 1, r.backoff_s, r.request_timeout_s)

    def sampler(self, step: int) -> Any:
        """A sampling client on the weights after ``step``."""
        name = f"{self.recipe.experiment}_sampler_{step}"
        return self._retried(
            lambda: self.training.save_weights_and_get_sampling_client(name=name),
            f"exporting the weights of step {step} for sampling",
        )

    def submit(
        self, sampler: Any, problems: Sequence[Problem], n: int, temperature: float
    ) -> list[Future[Any]]:
        from tinker import types

        params = types.SamplingParams(
            max_tokens=self.recipe.max_tokens, temperature=temperature, seed=None
        )
        return [
            sampler.sample(
                prompt=types.ModelInput.from_ints(list(p.tokens)),
                num_samples=n,
                sampling_params=params,
            )
            for p in problems
        ]

    def collect(self, problems: Sequence[Problem], futures: list[Future[Any]]) -> list[Graded]:
        graded = []
        for problem, future in zip(problems, futures, strict=True):
            try:
                response = future.result(timeout=self.recipe.request_timeout_s)
            except Exception as exc:
                raise explain(exc, "sampling") from None
            graded.append(self._grade(problem, response.sequences))
        return graded

    def _grade(self, problem: Problem, sequences: Sequence[Any]) -> Graded:
        samples, rows, rewards = [], [], []
        for sequence in sequences:
            tokens = [int(t) for t in sequence.tokens]
            logprobs = sequence.logprobs
            if logprobs is None or len(logprobs) != len(tokens):
                raise explain(ValueError("the sampler returned no log prob per token"), "sampling")
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            result = self.grade(problem, text)
            rewards.append(result)
            score = float(result["score"])
            samples.append(Sample(problem.tokens, tuple(tokens), tuple(logprobs), score))
            truncated = str(getattr(sequence, "stop_reason", "")) == "length"
            extras = {k: v for k, v in result.items() if k != "score"}
            rows.append(
                {"input": problem.text, "output": text, "gts": problem.ground_truth, "score": score,
                 **extras, "response_length": len(tokens), "truncated": truncated}
            )  # fmt: skip
        return Graded(problem, samples, rows, rewards)

    # ---- one training step ---------------------------------------------------------------
    def batch(self, step: int) -> list[Problem]:
        rows = batch_rows(step, self.recipe.batch_prompts, len(self.train), self.recipe.seed)
        return [self.train[i] for i in rows]

    def update(self, graded: list[Graded]) -> dict[str, float]:
        """forward_backward + optim_step on the kept groups; the step's update metrics."""
        from tinker import types

        r = self.recipe
        inputs, advantages = build_datums(
            [g.samples for g in graded], norm_by_std=r.norm_by_std, drop_constant=r.drop_constant
        )
        kept = [a for group in advantages if group is not None for a in group]
        metrics = {
            "batch/kept_groups": float(sum(a is not None for a in advantages)),
            "batch/dropped_groups": float(sum(a is None for a in advantages)),
            "actor/lr": r.learning_rate,
        }
        if kept:
            metrics |= {"critic/advantages/mean": mean(kept), "critic/advantages/max": max(kept),
                        "critic/advantages/min": min(kept)}  # fmt: skip
        if not inputs:  # every group agreed: nothing to learn from
            return metrics | {"actor/skipped_update": 1.0}
        try:
            backward = self.training.forward_backward([to_datum(i) for i in inputs], r.loss_fn)
            step = self.training.optim_step(types.AdamParams(learning_rate=r.learning_rate))
            wait = r.request_timeout_s
            output, optimized = backward.result(timeout=wait), step.result(timeout=wait)
        except Exception as exc:
            raise explain(exc, "the train step (forward_backward + optim_step)") from None
        kept_groups = [g for g, a in zip(graded, advantages, strict=True) if a is not None]
        tokens = sum(len(s.tokens) for g in kept_groups for s in g.samples)  # the token mean's
        server = dict(getattr(output, "metrics", {}) or {})
        server |= dict(getattr(optimized, "metrics", None) or {})
        if "loss:sum" in server:
            metrics["actor/pg_loss"] = float(server["loss:sum"]) / tokens
        for key, value in server.items():
            metrics[f"tinker/{key}"] = float(value)
            if key.startswith("grad_norm"):
                metrics["actor/grad_norm"] = float(value)
        return metrics | {"actor/skipped_update": 0.0}

    def save(self, step: int) -> Checkpoint:
        r = self.recipe
        saved = self._retried(
            lambda: self.training.save_state(name=f"{r.experiment}_step_{step}").result(
                timeout=r.request_timeout_s
            ),
            f"saving the state of step {step}",
        )
        checkpoint = Checkpoint(step, str(saved.path), r.model, r.lora_rank)
        record_checkpoint(r.run_dir, checkpoint)
        return checkpoint

    def validate(self, sampler: Any, step: int) -> dict[str, float]:
        """Greedy (the val temperature) answers to the held-out prompts: verl's val-core keys,
        and their table (prompts decoded without special tokens, as verl shows them)."""
        if not self.val:
            return {}
        graded = self.collect(
            self.val, self.submit(sampler, self.val, 1, self.recipe.val_temperature)
        )
        source = self.val[0].data_source
        rows = [row for g in graded for row in g.rows]
        prompts = [
            self.tokenizer.decode(g.problem.tokens, skip_special_tokens=True) for g in graded
        ]
        self.log.log_generations(
            prompts, [row["output"] for row in rows], [row["score"] for row in rows], step
        )
        return validation_metrics(source, [reward for g in graded for reward in g.rewards])

    def run(self, start: int) -> int:
        """Train steps ``start + 1 .. recipe.steps``; returns the last step trained."""
        r = self.recipe
        sampler = self.sampler(start)
        if start == 0 and r.val_before_train:
            self.log.log(self.validate(sampler, 0), 0)
        problems = self.batch(start + 1)
        pending = self.submit(sampler, problems, r.group_size, r.temperature)
        for step in range(start + 1, r.steps + 1):
            began = time.perf_counter()
            graded = self.collect(problems, pending)
            sampled = time.perf_counter()
            ahead = r.sample_ahead and step < r.steps
            if ahead:  # the next batch, from the weights one step old, while this one trains
                problems = self.batch(step + 1)
                pending = self.submit(sampler, problems, r.group_size, r.temperature)
            metrics = self.update(graded)
            trained = time.perf_counter()
            last = step == r.steps
            if (r.save_freq > 0 and step % r.save_freq == 0) or last:
                self.save(step)
                metrics["timing_s/save_checkpoint"] = time.perf_counter() - trained
            validating = r.test_freq > 0 and (step % r.test_freq == 0 or last)
            if validating or not last:
                sampler = self.sampler(step)
            if validating:
                testing = time.perf_counter()
                metrics |= self.validate(sampler, step)
                metrics["timing_s/testing"] = time.perf_counter() - testing
            if not ahead and not last:
                problems = self.batch(step + 1)
                pending = self.submit(sampler, problems, r.group_size, r.temperature)
            epoch = (step - 1) * r.batch_prompts // len(self.train)
            metrics |= step_metrics(graded, r, step, epoch, r.sample_ahead and step > start + 1)
            elapsed = time.perf_counter() - began
            metrics |= {"timing_s/gen": sampled - began, "timing_s/update_actor": trained - sampled,
                        "timing_s/step": elapsed, "perf/time_per_step": elapsed}  # fmt: skip
            dump_rollouts(r.rollouts_dir, step, [row for g in graded for row in g.rows])
            self.log.log(metrics, step)
            print(progress_line(step, r.steps, metrics), flush=True)
        return r.steps


def spread(name: str, values: Sequence[float]) -> dict[str, float]:
    return {f"{name}/mean": mean(values), f"{name}/max": max(values), f"{name}/min": min(values)}


def step_metrics(
    graded: list[Graded], recipe: TinkerRecipe, step: int, epoch: int, lagged: bool
) -> dict[str, float]:
    """The batch's scores and lengths under verl's metric names (verl's ``compute_data_metrics``
    and ``compute_throughout_metrics``; what the report reads). The reward is the score: no KL
    term enters it (the importance-sampling loss has none)."""
    samples = [s for g in graded for s in g.samples]
    scores = [s.reward for s in samples]
    lengths = [float(len(s.tokens)) for s in samples]
    prompts = [float(len(s.prompt_tokens)) for s in samples]
    return {
        **spread("critic/score", scores), **spread("critic/rewards", scores),
        **spread("response_length", lengths),
        "response_length/clip_ratio": mean([float(n >= recipe.max_tokens) for n in lengths]),
        **spread("prompt_length", prompts),
        "prompt_length/clip_ratio": mean([float(n >= recipe.max_prompt_tokens) for n in prompts]),
        "perf/total_num_tokens": sum(lengths) + sum(prompts),
        "training/global_step": float(step), "training/epoch": float(epoch),
        "tinker/sampler_lag": float(lagged),
    }  # fmt: skip


def validation_metrics(source: str, rewards: list[dict[str, Any]]) -> dict[str, float]:
    """One answer per held-out prompt, under verl's names for it (``_validate``): the mean of
    the score (``reward``) and of each of the reward's numeric keys, ``mean@1``; ``acc`` (or
    ``reward`` when the reward gives none) is ``val-core``, the rest ``val-aux``."""
    keys = [k for k, v in rewards[0].items() if isinstance(v, int | float)]
    columns = {"reward": [float(r["score"]) for r in rewards]}
    columns |= {k: [float(r[k]) for r in rewards] for k in keys if all(k in r for r in rewards)}
    core = "acc" if "acc" in columns else "reward"
    return {
        f"{'val-core' if name == core else 'val-aux'}/{source}/{name}/mean@1": mean(values)
        for name, values in columns.items()
    }


def progress_line(step: int, steps: int, metrics: dict[str, float]) -> str:
    parts = [f"step {step}/{steps}", f"score {metrics['critic/score/mean']:.3f}"]
    if "actor/pg_loss" in metrics:
        parts.append(f"pg_loss {metrics['actor/pg_loss']:+.4f}")
    parts.append(f"kept {int(metrics['batch/kept_groups'])} groups")
    val = [f"{k} {v:.3f}" for k, v in metrics.items() if k.startswith("val-core/")]
    return "tinker: " + ", ".join(parts + val) + f" ({metrics['timing_s/step']:.1f} s)"

"""A Tinker experiment's run, what ``scripts/train.sh`` runs for one once pre-flight has passed
(through ``rlvr.train.launch``, whose supervisor tees its output to the run's log as it does
verl's driver's): connect, resume from the run folder's last checkpoint if it has one, train
(rlvr.tinker.loop), write the run report, and download the last checkpoint's LoRA adapter into
the run folder.

Usage: python -m rlvr.tinker.train EXPERIMENT [hydra overrides...]

Any failure the run stops on is one line naming the cause and the fix (exit 1); Ctrl-C, SIGTERM
or SIGHUP stop it between two writes, say from which step a rerun resumes, and exit 128 + the
signal. Nothing in the run folder is left half written.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.common.messages import first_line
from rlvr.common.signals import interrupt_signal, sigterm_as_interrupt
from rlvr.common.supervision import stop_with_parent
from rlvr.report.run_plan import write_run_plan
from rlvr.tinker.recipe import RecipeError, TinkerRecipe
from rlvr.tinker.run_folder import (
    ADAPTER_DIR,
    PEFT_CONFIG,
    Checkpoint,
    adapter_step,
    checkpoints,
    identity_problem,
    record_adapter,
    store_adapter,
)
from rlvr.tinker.service import TinkerRunError, retried, service_client
from rlvr.tinker.tracking import run_log

NAME = "tinker"


def load_tokenizer(model: str) -> Any:
    """The base model's tokenizer (a hub id from the HF cache or the hub, or a local folder)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model)
    except Exception as exc:
        raise TinkerRunError(
            f"cannot load the tokenizer of {model} ({first_line(exc)}); the loop renders and "
            "decodes with it: check actor_rollout_ref.model.path, or the network for a hub id"
        ) from None


def last_checkpoint(recipe: TinkerRecipe) -> Checkpoint | None:
    """The run folder's newest checkpoint, refused when it was trained as another model or
    rank (resuming from it would continue another run)."""
    if (problem := identity_problem(recipe.run_dir, recipe.model, recipe.lora_rank)) is not None:
        raise TinkerRunError(problem)
    saved = checkpoints(recipe.run_dir)
    return saved[-1] if saved else None


def start_training(recipe: TinkerRecipe, service: Any) -> tuple[Any, int]:
    """The training client and the last step already trained: from the run folder's newest
    checkpoint (weights and optimizer), or a new LoRA adapter at step 0."""
    last = last_checkpoint(recipe)
    attempts, backoff = recipe.max_retries + 1, recipe.backoff_s
    wait = recipe.request_timeout_s
    if last is not None:
        print(f"{NAME}: resuming from step {last.step}: {last.state_path}", flush=True)
        client = retried(
            lambda: service.create_training_client_from_state_with_optimizer(last.state_path),
            f"loading the checkpoint of step {last.step}",
            attempts,
            backoff,
            wait,
        )
        return client, last.step
    client = retried(
        lambda: service.create_lora_training_client(
            base_model=recipe.model, rank=recipe.lora_rank, seed=recipe.seed
        ),
        f"creating a LoRA rank-{recipe.lora_rank} training client of {recipe.model}",
        attempts,
        backoff,
        wait,
    )
    return client, 0


def fetch_adapter(recipe: TinkerRecipe, service: Any, training: Any, step: int) -> Path:
    """The trained adapter as sampler weights on the server, downloaded into the run folder
    and recorded as the adapter of ``step``."""
    name, wait = f"{recipe.experiment}_adapter_{step}", recipe.request_timeout_s

    def call(function: Any, doing: str) -> Any:
        return retried(function, doing, recipe.max_retries + 1, recipe.backoff_s, wait)

    saved = call(
        lambda: training.save_weights_for_sampler(name=name).result(timeout=wait),
        "exporting the adapter",
    )
    rest = service.create_rest_client()
    archive = call(
        lambda: rest.get_checkpoint_archive_url_from_tinker_path(saved.path).result(timeout=wait),
        "asking for the adapter's download address",
    )
    adapter = call(
        lambda: store_adapter(str(archive.url), recipe.run_dir, wait), "downloading the adapter"
    )
    record_adapter(recipe.run_dir, step, str(saved.path))
    return adapter


def finished(recipe: TinkerRecipe) -> bool:
    """Trained to its last step, whose adapter ``adapter/`` already holds: nothing to send."""
    last = last_checkpoint(recipe)
    return (
        last is not None and last.step >= recipe.steps and adapter_step(recipe.run_dir) == last.step
    )


def train(recipe: TinkerRecipe, plan: dict[str, Any]) -> int:
    """The run; ``plan``: the run plan's fields for the report (model, task, answer protocol)."""
    from rlvr.tinker.loop import TinkerLoop
    from rlvr.tinker.problems import grader, load_problems

    if finished(recipe):
        print(f"{NAME}: already trained, and its adapter is in {recipe.run_dir / ADAPTER_DIR}; "
              "nothing to do", flush=True)  # fmt: skip
        return 0
    recipe.run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(recipe.model)
    try:
        train_rows = load_problems(
            recipe.train_files, tokenizer, recipe.template_kwargs, recipe.max_prompt_tokens
        )
        val_rows = load_problems(
            recipe.val_files, tokenizer, recipe.template_kwargs, recipe.max_prompt_tokens,
            recipe.val_max_samples,
        )  # fmt: skip
    except (OSError, ValueError) as exc:
        raise TinkerRunError(f"data: {first_line(exc)}") from None
    service = service_client(recipe.request_timeout_s, recipe.max_retries)
    training, start = start_training(recipe, service)
    write_run_plan(
        recipe.metrics_path.parent, recipe.steps, recipe.experiment, recipe.run_dir, **plan
    )
    if start >= recipe.steps:
        print(f"{NAME}: step {start} of {recipe.steps} already trained; fetching its adapter",
              flush=True)  # fmt: skip
    else:
        grade = grader(recipe.reward_path, recipe.reward_name, recipe.reward_kwargs)
        with run_log(recipe, resuming=start > 0) as log:
            TinkerLoop(recipe, training, tokenizer, grade, train_rows, val_rows, log).run(start)
    step = max(start, recipe.steps)
    adapter = fetch_adapter(recipe, service, training, step)
    print(f"{NAME}: adapter of step {step}: {adapter}", flush=True)
    if not (adapter / PEFT_CONFIG).is_file():
        print(
            f"{NAME}: warning: {adapter} holds no {PEFT_CONFIG}: the server saved no PEFT "
            "adapter (TuFT's CPU test mode saves metadata only), so eval cannot load it",
            file=sys.stderr,
            flush=True,
        )
    return 0


def write_report(recipe: TinkerRecipe) -> None:
    from rlvr.report import ReportError, build

    try:
        report = build(recipe.metrics_path.parent)
    except ReportError as exc:
        print(f"{NAME}: no report: {exc}", file=sys.stderr)
        return
    print(f"{NAME}: report {report.path} ({len(report.fired)} alarms fired)", flush=True)


def run(experiment: str, overrides: Sequence[str]) -> int:
    from rlvr.config.compose import compose
    from rlvr.report.references import plan_fields

    config = compose(experiment, list(overrides))
    try:
        recipe = TinkerRecipe.from_config(config)
    except RecipeError as exc:  # pre-flight refuses these first; a direct call gets them too
        for problem in exc.problems:
            print(f"{NAME}: error: {problem}", file=sys.stderr)
        return 2
    print(f"{NAME}: {experiment}: {recipe.model}, LoRA rank {recipe.lora_rank}, lr "
          f"{recipe.learning_rate:g}, {recipe.batch_prompts} prompts x {recipe.group_size}, "
          f"{recipe.steps} steps -> {recipe.run_dir}", flush=True)  # fmt: skip
    try:
        with sigterm_as_interrupt():
            code = train(recipe, plan_fields(config))
    except TinkerRunError as exc:
        print(f"{NAME}: error: {exc}", file=sys.stderr, flush=True)
        code = 1
    except KeyboardInterrupt as exc:
        saved = checkpoints(recipe.run_dir)
        where = f"step {saved[-1].step}" if saved else "the start"
        print(f"{NAME}: stopped; run the same command again to resume from {where}",
              file=sys.stderr, flush=True)  # fmt: skip
        return 128 + interrupt_signal(exc)
    if recipe.metrics_path.is_file():
        write_report(recipe)
    return code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    stop_with_parent()  # the launcher's supervisor asks: a run outlives no killed launcher
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return run(args[0], args[1:])


if __name__ == "__main__":
    raise SystemExit(main())

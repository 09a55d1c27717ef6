"""One model eval, each stage called once and in order (``run_model_command``, ``evaluate``):
settings, model, prompts, generation, grading, statistics, the run folder written whole. Bad input
raises ``EvalError`` before the model loads; docs/ERRORS.md lists what each command refuses."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rlvr.evaluation import EvalError, generation, model, prompts, settings, statistics
from rlvr.evaluation.grading import EvalRun
from rlvr.evaluation.prompts import Row, tokenizer_of
from rlvr.evaluation.records import Recommendations, Summary, write_jsonl
from rlvr.evaluation.run_folder import (
    default_output_dir,
    refuse_existing,
    staged_run_dir,
    write_summary,
)
from rlvr.evaluation.settings import SamplingSettings


def run_model_command(task_name: str, args: argparse.Namespace) -> int:
    """One model eval, its stages in order: settings, model, the output folders, prompts, every
    input checked before the model loads (docs/ERRORS.md lists what each command refuses)."""
    from rlvr import tasks

    task = tasks.get(task_name)
    found, sampling, ks = settings.command_settings(task, args)
    if args.model_path is None:
        raise EvalError(f"{args.command} needs --model_path (a model folder or a hub id)")
    source = model.resolve_model(args.model_path, args.base_model)  # before data or torch
    output_dir = Path(args.output or default_output_dir(task_name, args.command, args.model_path))
    refuse_existing(output_dir, args.force, run=True)
    greedy_dir = greedy_output(args, output_dir)
    data_path = args.data or str(task.eval_data)
    rows = prompts.load_rows(data_path, args.limit, task)
    model.check_context(source, sampling.max_tokens)  # after --data's checks: theirs win
    backend = generation.make_backend(args.backend, source, batch_size=args.batch_size)
    run = EvalRun(
        task=task,
        model_path=args.model_path,
        data_path=data_path,
        output_dir=output_dir,
        backend=backend,
        reward_kwargs=found.reward_kwargs,
        template_kwargs=found.template_kwargs,
        prompts_per_chunk=prompts_per_chunk(backend.name, args.batch_size, sampling.n),
        progress=not args.quiet,
        force=args.force,
        training=found,
        generation_eos=model.generation_config_eos(source.weights_path),
    )
    summary = evaluate(args.command, run, rows, sampling, ks)
    if greedy_dir is not None:  # reward, exactly as it runs alone, on what is loaded
        chunk = prompts_per_chunk(backend.name, args.batch_size, 1)
        evaluate(
            "reward", replace(run, output_dir=greedy_dir, prompts_per_chunk=chunk), rows, sampling
        )
    print((output_dir / "summary.md").read_text(), end="")
    print(f"\nrun directory: {output_dir}")
    if greedy_dir is not None:
        print(f"greedy run directory: {greedy_dir}")
    if args.wandb:
        from rlvr.evaluation.run_folder import log_to_wandb

        mode = log_to_wandb(output_dir, summary, args.wandb_project)
        print(f"wandb: logged ({mode}) under {output_dir / 'wandb'}")
    return 0


def evaluate(
    command: str,
    run: EvalRun,
    rows: Sequence[Row],
    sampling: SamplingSettings,
    ks: Sequence[int] = (),
) -> Summary:
    """One ``reward``, ``passk`` or ``analyse`` eval of what ``run`` has loaded: generation and
    grading, the command's statistics, and the run folder written whole. ``reward`` decodes
    greedily, one response per prompt, whatever ``sampling`` says of n and temperature. The
    group, k values (passk's default: ``settings.default_ks``) and reward kwargs are checked
    before any decoding (the CLI has checked them before the model loaded)."""
    if command not in ("reward", "passk", "analyse"):
        raise EvalError(f"evaluate: {command!r} is not reward, passk or analyse")
    if command == "reward":
        sampling = settings.greedy(sampling)
    ks = settings.check_group(command, sampling.n, ks)
    settings.check_reward_kwargs(run.task, run.reward_kwargs, "reward kwargs")
    voting = command == "passk" and run.task.load_answer_key() is not None
    with staged_run_dir(run.output_dir, run.force) as folder:
        graded = run.sample_and_grade(rows, sampling, folder)
        found = statistics.run_statistics(command, graded, sampling, ks, voting, run.training)
        if command != "reward":
            write_jsonl(folder / "prompts.jsonl", (r.to_json() for r in found.records))
        recommended = None
        if found.settings is not None:
            checks = model.model_checks(
                tokenizer_of(run.backend),
                run.template_kwargs,
                run.generation_eos,
                graded,
                sampling.max_tokens,
            )
            recommended = Recommendations(settings=found.settings, checks=checks)
        summary = Summary(
            run.header(command, sampling, rows), found.metrics, found.verdict, {}, recommended
        )
        return write_summary(folder, summary.timed(run.generation_seconds, graded))


def greedy_output(args: argparse.Namespace, output_dir: Path) -> Path | None:
    """``--greedy_output``, checked like ``--output``: passk and analyse only, another folder."""
    if not args.greedy_output:
        return None
    if args.command == "reward":
        raise EvalError("--greedy_output is for passk and analyse: reward decodes greedily itself")
    folder = Path(args.greedy_output)
    if folder.resolve() == output_dir.resolve():
        raise EvalError(f"--greedy_output {folder} is --output too: give each run its own folder")
    refuse_existing(folder, args.force, run=True)
    return folder


def prompts_per_chunk(backend: str, batch_size: int, samples_per_prompt: int) -> int:
    """Prompts per generate call. HF: enough to fill a decoding batch of ``batch_size``
    sequences; vLLM: large chunks, it schedules itself."""
    return max(1, batch_size // samples_per_prompt) if backend == "hf" else 256

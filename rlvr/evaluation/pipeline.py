"""One model eval, each stage called once and in order (``run_model_command``, ``evaluate``):
settings, model, the run folders, prompts, generation, grading, statistics, the run folder written
whole. Bad input raises ``EvalError`` before the model loads; docs/ERRORS.md lists what each
command refuses."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

from rlvr.evaluation import EvalError, generation, model, prompts, run_folder, settings, statistics
from rlvr.evaluation.grading import EvalRun
from rlvr.evaluation.prompts import Row
from rlvr.evaluation.records import Recommendations, Summary
from rlvr.evaluation.settings import SamplingSettings


def run_model_command(task_name: str, args: argparse.Namespace) -> int:
    """One model eval, its stages in order: settings, model, the output folders, prompts,
    generation (its backend loaded once every input has been checked), then ``evaluate``."""
    from rlvr import tasks

    task = tasks.get(task_name)
    found, sampling, ks = settings.command_settings(task, args)
    if args.model_path is None:
        raise EvalError(f"{args.command} needs --model_path (a model folder or a hub id)")
    source = model.resolve_model(args.model_path, args.base_model)  # before data or torch
    output_dir, greedy_dir = run_folder.output_dirs(task_name, args)
    data_path = args.data or str(task.eval_data)
    rows = prompts.load_rows(data_path, args.limit, task)
    # --max_tokens against the model's context: after --data's checks (theirs win), before loading
    backend = generation.make_backend(
        args.backend, source, args.batch_size, sampling.max_tokens, args.dtype
    )
    chunk = generation.prompts_per_chunk(backend.name, args.batch_size, sampling.n)
    greedy_chunk = generation.prompts_per_chunk(backend.name, args.batch_size, 1)
    run = EvalRun(
        task=task,
        model_path=args.model_path,
        data_path=data_path,
        output_dir=output_dir,
        backend=backend,
        reward_kwargs=found.reward_kwargs,
        template_kwargs=found.template_kwargs,
        prompts_per_chunk=chunk,
        progress=not args.quiet,
        force=args.force,
        training=found,
        generation_eos=backend.generation_eos,
    )
    summary = evaluate(args.command, run, rows, sampling, ks)
    if greedy_dir is not None:  # reward, exactly as it runs alone, on what is loaded
        greedy_run = replace(run, output_dir=greedy_dir, prompts_per_chunk=greedy_chunk)
        evaluate("reward", greedy_run, rows, sampling)
    print((output_dir / "summary.md").read_text(), end="")
    print(f"\nrun directory: {output_dir}")
    if greedy_dir is not None:
        print(f"greedy run directory: {greedy_dir}")
    if args.wandb:
        mode = run_folder.log_to_wandb(output_dir, summary, args.wandb_project)
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
    with run_folder.staged_run_dir(run.output_dir, run.force) as folder:
        graded = run.sample_and_grade(rows, sampling, folder)
        header = run.header(command, sampling, rows)
        checks = run.model_checks(graded, sampling.max_tokens) if command == "analyse" else []
        found = statistics.run_statistics(command, graded, sampling, ks, voting, run.training)
        recommended = None  # analyse's: its suggested settings and the model checks
        if found.settings is not None:
            recommended = Recommendations(settings=found.settings, checks=checks)
        summary = Summary(header, found.metrics, found.verdict, {}, recommended)
        records = None if command == "reward" else found.records
        return run_folder.write_summary(
            folder, summary.timed(run.generation_seconds, graded), records
        )

"""What each eval command does with its parsed options (``cli.py`` builds the parser).

Bad input raises ``EvalError`` before the model loads: the model path (and a LoRA adapter's
base), an ``--output`` that exists without ``--force``, is a link or cannot be written, the
reward kwargs (by name and value) and template kwargs, the data (Parquet, verl's columns, the
task's data_source, chat-message prompts), the sampling settings, and ``--max_tokens`` against
the model's context.
docs/ERRORS.md lists what each command refuses.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from rlvr.evaluation import runs
from rlvr.evaluation.comparable import check_comparable
from rlvr.evaluation.errors import EvalError
from rlvr.evaluation.generation import SamplingSettings
from rlvr.evaluation.outputs import (
    check_complete_run,
    default_output_dir,
    refuse_existing,
    refuse_existing_run,
    write_new_text,
)
from rlvr.evaluation.paired import EvalRunSamples, deltas_between
from rlvr.evaluation.records import Summary, load_summary
from rlvr.evaluation.reports import compare_markdown, stats_markdown, summary_markdown
from rlvr.evaluation.selection import filter_learnable, high_value_prompts, load_prompt_records
from rlvr.evaluation.settings import RunSettings, eval_settings


def compare(base: str, trained: str, output: str | None, force: bool) -> int:
    """The two runs side by side; the per-prompt means with their paired 95% intervals. Runs
    that differ in anything but the model are refused (``comparable.py``)."""
    if output:
        refuse_existing(Path(output), force)
        refuse_output_in_inputs(Path(output), {"BASE": base, "TRAINED": trained})
    check_complete_run(Path(base), "BASE")
    check_complete_run(Path(trained), "TRAINED")
    summaries = load_summary(base), load_summary(trained)
    if summaries[0].header.task != summaries[1].header.task:
        raise EvalError(
            f"BASE {base} is a {summaries[0].header.task} run and TRAINED {trained} a "
            f"{summaries[1].header.task} run: their scores do not compare; pass two runs of one "
            "task"
        )
    # a summary.json given stands for its run folder: the samples are read beside it
    before, after = (
        EvalRunSamples.load(path if Path(path).is_dir() else Path(path).parent, summary)
        for path, summary in zip((base, trained), summaries, strict=True)
    )
    warnings = check_comparable(before, after)
    prompts = len(before.prompts)
    deltas = deltas_between(before, after) if prompts > 1 else []
    table = compare_markdown(*summaries, deltas)
    if prompts < 2:
        warnings.append("warning: one prompt: no interval; evaluate more prompts to judge")
    table += "".join(f"{line}\n" for line in warnings)
    print(table, end="")
    if output:
        write_new_text(Path(output), table, force)
    return 0


def refuse_output_in_inputs(output: Path, inputs: dict[str, str]) -> None:
    """``compare --output`` inside (or equal to) a run it compares would overwrite that run's
    files (``--force`` onto ``BASE/summary.json``); refused. A ``summary.json`` given as input
    stands for its run folder."""
    target = output.resolve()
    for name, given in inputs.items():
        run = Path(given).resolve()
        if run.is_file() and run.name == "summary.json":
            run = run.parent
        if target == run or target.is_relative_to(run):
            raise EvalError(
                f"--output {output}: inside {name} {given}, a run being compared; write the "
                "table outside both runs"
            )


def stats(run_dir: str, var_min: float, entropy_min: float, top: int) -> int:
    records, _ = load_prompt_records(run_dir)
    chosen = high_value_prompts(records, var_min, entropy_min)
    print(stats_markdown(records, chosen, var_min, entropy_min, top))
    return 0


def filter_prompts(
    run_dir: str, output: str, var_min: float, entropy_min: float, force: bool
) -> int:
    written, total = filter_learnable(run_dir, output, var_min, entropy_min, force)
    print(f"wrote {written} of {total} prompts to {output}")
    return 0


def sampling_settings(args: argparse.Namespace, settings: RunSettings) -> SamplingSettings:
    """The command's sampling options, where not given the training rollout's (temperature,
    top_p) and response length; ``reward`` has none and decodes greedily."""
    given = {"n": args.n} if "n" in args else {}
    for key in ("temperature", "top_p"):
        if key in args:
            flag, trained = getattr(args, key), getattr(settings, key)
            given[key] = flag if flag is not None else (1.0 if trained is None else trained)
    return SamplingSettings(
        max_tokens=args.max_tokens or settings.max_response_length, seed=args.seed, **given
    )


def checked_ks(command: str, args: argparse.Namespace, sampling: SamplingSettings) -> list[int]:
    """The passk command's k values (checked against n); analyse's group size checked; both
    need sampling (at temperature 0 every sample of a prompt is the same)."""
    n = sampling.n
    if command in ("passk", "analyse") and n > 1 and sampling.temperature <= 0.0:
        raise EvalError(
            f"--temperature 0 with --n {n}: greedy samples are all the same, so {command} would "
            "measure nothing; pass training's rollout temperature (e.g. --temperature 1.0)"
        )
    if command == "passk":
        ks: list[int] = args.k or runs.default_ks(n)
        runs.check_passk(n, ks)
        return ks
    if command == "analyse":
        runs.check_analyse(n)
    return []


def greedy_output(args: argparse.Namespace, output_dir: Path) -> Path | None:
    """``--greedy_output``, checked like ``--output``: passk and analyse only, another folder."""
    if not args.greedy_output:
        return None
    if args.command == "reward":
        raise EvalError("--greedy_output is for passk and analyse: reward decodes greedily itself")
    folder = Path(args.greedy_output)
    if folder.resolve() == output_dir.resolve():
        raise EvalError(f"--greedy_output {folder} is --output too: give each run its own folder")
    refuse_existing_run(folder, args.force)
    return folder


def prompts_per_chunk(backend: str, batch_size: int, samples_per_prompt: int) -> int:
    """Prompts per generate call. HF: enough to fill a decoding batch of ``batch_size``
    sequences; vLLM: large chunks, it schedules itself."""
    return max(1, batch_size // samples_per_prompt) if backend == "hf" else 256


def run_model_command(task_name: str, args: argparse.Namespace) -> int:
    """Every input checked, cheapest first, before the model loads; then the run."""
    from rlvr import tasks
    from rlvr.evaluation.generation import make_backend
    from rlvr.evaluation.model_checks import generation_config_eos
    from rlvr.evaluation.model_source import check_context, resolve_model

    task = tasks.get(task_name)
    if args.model_path is None:
        raise EvalError(f"{args.command} needs --model_path (a model folder or a hub id)")
    source = resolve_model(args.model_path, args.base_model)  # fails fast, before data or torch
    output_dir = Path(args.output or default_output_dir(task_name, args.command, args.model_path))
    refuse_existing_run(output_dir, args.force)
    greedy_dir = greedy_output(args, output_dir)
    settings = eval_settings(task, args.experiment, args.reward_kwargs, args.template_kwargs)
    data_path = args.data or str(task.eval_data)
    rows = runs.load_rows(data_path, args.limit, task)
    sampling = sampling_settings(args, settings)
    ks = checked_ks(args.command, args, sampling)
    check_context(source, sampling.max_tokens)
    backend = make_backend(args.backend, source, batch_size=args.batch_size)
    weights = source.base if source.kind == "lora" and source.base else source.path
    run = runs.EvalRun(
        task=task,
        model_path=args.model_path,
        data_path=data_path,
        output_dir=output_dir,
        backend=backend,
        reward_kwargs=settings.reward_kwargs,
        template_kwargs=settings.template_kwargs,
        prompts_per_chunk=prompts_per_chunk(backend.name, args.batch_size, sampling.n),
        progress=not args.quiet,
        force=args.force,
        training=settings,
        generation_eos=generation_config_eos(weights),
    )
    summary = execute(args.command, run, rows, sampling, ks)
    if greedy_dir is not None:
        run_greedy_too(run, rows, sampling, greedy_dir, args.batch_size)
    print(summary_markdown(summary), end="")
    print(f"\nrun directory: {output_dir}")
    if greedy_dir is not None:
        print(f"greedy run directory: {greedy_dir}")
    if args.wandb:
        from rlvr.evaluation.wandb_log import log_to_wandb

        mode = log_to_wandb(output_dir, summary, args.wandb_project)
        print(f"wandb: logged ({mode}) under {output_dir / 'wandb'}")
    return 0


def run_greedy_too(
    run: runs.EvalRun,
    rows: list[runs.Row],
    sampling: SamplingSettings,
    folder: Path,
    batch_size: int,
) -> Summary:
    """``reward`` into ``folder`` on the model and prompts ``run`` has loaded, exactly as it runs
    alone: greedy, the same response length and seed, ``batch_size`` prompts a chunk (HF)."""
    greedy = SamplingSettings(max_tokens=sampling.max_tokens, seed=sampling.seed)
    chunk = prompts_per_chunk(run.backend.name, batch_size, greedy.n)
    return runs.run_reward(replace(run, output_dir=folder, prompts_per_chunk=chunk), rows, greedy)


def execute(
    command: str,
    run: runs.EvalRun,
    rows: list[runs.Row],
    sampling: SamplingSettings,
    ks: list[int],
) -> Summary:
    if command == "reward":
        return runs.run_reward(run, rows, sampling)
    if command == "passk":
        return runs.run_passk(run, rows, sampling, ks)
    return runs.run_analyse(run, rows, sampling)

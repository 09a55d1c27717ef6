"""The command line shared by ``scripts/eval_countdown.py`` and ``scripts/eval_gsm8k.py``.

The model commands (``reward``, ``passk``, ``analyse``) share the common options, each stated
once in ``COMMON_OPTIONS``. argparse reads them before the command (on the main parser) and after
it (a parent parser of each model command), so ``--model_path X analyse`` and
``analyse --model_path X`` both work; a command's own options (sampling: ``--n``,
``--temperature``, ``--k``) come after it. Neither copy has a default (``argparse.SUPPRESS``): a
subcommand's defaults would overwrite what the main parser read, so ``parse`` fills them in
afterwards. With no command, ``reward`` runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlvr.common.cli import OneLineParser, float_in, int_in
from rlvr.common.files import report_disk_full
from rlvr.common.signals import sigterm_as_interrupt
from rlvr.evaluation import EvalError, generation, model, prompts, settings, statistics
from rlvr.evaluation.grading import EvalRun
from rlvr.evaluation.prompts import Row, tokenizer_of
from rlvr.evaluation.run_folder import (
    Recommendations,
    Summary,
    check_complete_run,
    default_output_dir,
    jsonable,
    load_prompt_records,
    load_summary,
    new_file,
    refuse_existing,
    staged_run_dir,
    summary_markdown,
    write_jsonl,
    write_new_text,
    write_summary,
)
from rlvr.evaluation.settings import SamplingSettings

COMMANDS = ("reward", "passk", "analyse", "stats", "filter", "compare")
MODEL_COMMANDS = ("reward", "passk", "analyse")
DEFAULT_COMMAND = "reward"
Subcommands = argparse._SubParsersAction  # what add_subparsers returns


# Upper bounds far beyond any real run: a typo'd value fails here, not after the model loads.
MAX_PROMPTS = 10_000_000
MAX_SAMPLES = 1024  # --n: GRPO groups are 4-64
MAX_TOKENS = 1_048_576  # above every model's context; the model's own limit is checked later
MAX_BATCH = 4096
MAX_TEMPERATURE = 10.0
# Below this, logits / temperature overflow: torch.multinomial then fails on inf/nan after the
# model has loaded. 0 (greedy) is allowed, and refused where it would measure nothing.
MIN_TEMPERATURE = 1e-3


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}): {text!r}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"format_score\": 0.1}'")
    return value


_positive_int = int_in(1, MAX_PROMPTS)


def _temperature(text: str) -> float:
    """An argparse type: 0 (greedy) or a sampling temperature in [MIN_TEMPERATURE, MAX]."""
    value = float_in(0.0, MAX_TEMPERATURE)(text)
    if 0.0 < value < MIN_TEMPERATURE:
        raise argparse.ArgumentTypeError(
            f"{text} is too small to sample with: use 0 (greedy) or at least {MIN_TEMPERATURE}"
        )
    return value


_temperature.__name__ = f"0 or a number in [{MIN_TEMPERATURE}, {MAX_TEMPERATURE}]"


def _k_list(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers") from None
    if not ks or ks[0] < 1 or ks[-1] > MAX_SAMPLES:
        raise argparse.ArgumentTypeError(f"{text!r}: k values must be between 1 and --n")
    return ks


def _option(name: str, text: str, **spec: Any) -> tuple[str, dict[str, Any]]:
    """One common option: its argparse settings; ``{task}`` in its help is the task's name."""
    return name, {"help": text, **spec}


COMMON_OPTIONS = (
    _option(
        "--model_path",
        "HF model folder (e.g. .../global_step_N/actor/huggingface), a LoRA adapter folder "
        "(loaded onto its base) or a hub id",
    ),
    _option("--base_model", "base model for a LoRA adapter (default: the adapter's own record)"),
    _option("--data", "data-prep Parquet (default artifacts/data/{task}/test.parquet)"),
    _option("--limit", "evaluate the first N prompts only", type=_positive_int),
    _option("--seed", "sampling seed (%(default)s)", default=0, type=int_in(0, 2**32 - 1)),
    _option(
        "--max_tokens",
        "max new tokens per response (default: the experiment's max_response_length)",
        type=int_in(1, MAX_TOKENS),
    ),
    _option(
        "--batch_size",
        "sequences the HF backend decodes together (%(default)s; vLLM batches itself)",
        default=16,
        type=int_in(1, MAX_BATCH),
    ),
    _option(
        "--backend",
        "%(default)s: vLLM when CUDA and the gpu extra are there, else the HF backend",
        default="auto",
        choices=("auto", "vllm", "hf"),
    ),
    _option(
        "--output",
        "run folder (default artifacts/eval/{task}_<command>_<model>); written whole at the "
        "end, an existing one is refused without --force",
    ),
    _option(
        "--force",
        "replace an existing --output, once the new run has completed",
        action="store_true",
    ),
    _option(
        "--greedy_output",
        "passk and analyse: also decode greedily (the reward command) into this run folder, "
        "with the model and prompts already loaded: one process where two would load them",
    ),
    _option(
        "--experiment",
        "sample and grade as this training experiment does: its max_response_length, rollout "
        "temperature and top_p, chat-template and reward kwargs (default: the response length "
        "and reward kwargs of the task's default experiment)",
    ),
    _option("--reward_kwargs", "JSON object overriding reward kwargs", type=_json_object),
    _option(
        "--template_kwargs",
        "JSON object for apply_chat_template, e.g. '{\"enable_thinking\": false}'",
        type=_json_object,
    ),
    _option(
        "--wandb",
        "log the summary and a generations table (offline unless WANDB_API_KEY is set)",
        action="store_true",
    ),
    _option("--wandb_project", "WandB project (%(default)s)", default="rlvr-recipes-eval"),
    _option("--quiet", "no progress bar", action="store_true"),
)
#: What each common option is when not given (``parse`` fills them in).
COMMON_DEFAULTS = {
    name[2:]: spec.get("default", False if "action" in spec else None)
    for name, spec in COMMON_OPTIONS
}


def _add_sampling_options(parser: argparse.ArgumentParser, *n_aliases: str) -> None:
    add = parser.add_argument
    add(
        "--temperature",
        type=_temperature,
        help=f"sampling temperature, {MIN_TEMPERATURE} to {MAX_TEMPERATURE:g} (0: greedy, "
        "--n 1 only); default: the experiment's rollout temperature, else 1.0",
    )
    add(
        "--top_p",
        type=float_in(0.0, 1.0, low_open=True),
        help="nucleus sampling, in (0, 1]; default: the experiment's rollout top_p, else 1.0",
    )
    alias = f"; {', '.join(n_aliases)} is an alias" if n_aliases else ""
    add(
        "--n",
        *n_aliases,
        dest="n",
        type=int_in(1, MAX_SAMPLES),
        default=16,
        help=f"samples per prompt, like GRPO's rollout.n (%(default)s){alias}",
    )


def common_options(task: str) -> argparse.ArgumentParser:
    """A parent parser holding ``COMMON_OPTIONS``, with no defaults (the module docstring);
    ``%(default)s`` in a help is filled here."""
    common = OneLineParser(add_help=False)
    for name, spec in COMMON_OPTIONS:
        text = spec["help"].replace("{task}", task).replace("%(default)s", str(spec.get("default")))
        common.add_argument(name, **{**spec, "default": argparse.SUPPRESS, "help": text})
    return common


def _add_model_commands(commands: Subcommands, task: str) -> None:
    common = common_options(task)
    commands.add_parser(
        "reward",
        parents=[common],
        help="greedy decoding: mean score, pass@1, format rate, mean response length",
    )
    passk = commands.add_parser(
        "passk", parents=[common], help="unbiased pass@k and maj@k from n samples"
    )
    _add_sampling_options(passk)
    passk.add_argument(
        "--k", type=_k_list, help="k values, each <= n (default: 1,4,8,16 up to n, and n)"
    )
    analyse = commands.add_parser(
        "analyse", parents=[common], help="signal probe: per-prompt variance and entropy, verdict"
    )
    _add_sampling_options(analyse, "--rollout_n")


def _add_run_commands(commands: Subcommands) -> None:
    for name, text in (
        ("stats", "list the high-value prompts of an analyse run"),
        ("filter", "write the learnable prompts of an analyse run as a training Parquet"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--input", required=True, help="an analyse run folder")
        sub.add_argument(
            "--var_min",
            type=float_in(0.0, 1.0),
            default=statistics.VARIANCE_MIN,
            help="keep prompts with reward variance above this (%(default)s)",
        )
        sub.add_argument(
            "--entropy_min",
            type=float_in(0.0, 1.0),
            default=statistics.ENTROPY_RANGE[0],
            help="and outcome entropy (bits) at least this (%(default)s)",
        )
        if name == "stats":
            sub.add_argument(
                "--top", type=_positive_int, default=20, help="rows to list (%(default)s)"
            )
        else:
            sub.add_argument(  # required, checked in parse: it may also come before filter
                "--output",
                default=argparse.SUPPRESS,
                help="Parquet to write, e.g. artifacts/data/countdown/train_learnable.parquet",
            )
            _add_force(sub)
    compare = commands.add_parser(
        "compare",
        help="two runs side by side, deltas with paired 95%% intervals; runs on other prompts or "
        "settings are refused",
    )
    compare.add_argument("base", help="run folder or summary.json of the base model")
    compare.add_argument("trained", help="run folder or summary.json of the trained model")
    compare.add_argument("--output", default=argparse.SUPPRESS, help="also write the table here")
    _add_force(compare)


def _add_force(parser: argparse.ArgumentParser) -> None:
    """A run command's ``--force``, with no default, like the common options' (see ``parse``)."""
    parser.add_argument(
        "--force",
        action="store_true",
        default=argparse.SUPPRESS,
        help="replace an existing --output",
    )


def build_parser(task: str, description: str) -> argparse.ArgumentParser:
    parser = OneLineParser(
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"commands (default {DEFAULT_COMMAND}): {', '.join(COMMANDS)}; see COMMAND --help.\n"
        f"The options of {', '.join(MODEL_COMMANDS)} may also come before the command.",
        parents=[common_options(task)],
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_model_commands(commands, task)
    _add_run_commands(commands)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """The parsed line, the common options' defaults filled in; with no command, ``reward``.
    Common options a run command has no use for (``--limit 3 stats``) are refused; its own
    ``--output`` and ``--force`` may come before it too."""
    unknown = _unknown_option_before_command(parser, argv)
    if unknown:  # else argparse takes its value for the command: "invalid choice: '1'"
        parser.error(f"unrecognized arguments: {unknown}")
    args = parser.parse_args(argv)
    args.command = args.command or DEFAULT_COMMAND
    if args.command == "filter" and "output" not in vars(args):
        parser.error("filter: the following arguments are required: --output")
    if args.command not in MODEL_COMMANDS:
        own = {"output", "force"} if args.command != "stats" else set()
        stray = [f"--{dest}" for dest in COMMON_DEFAULTS if dest in vars(args) and dest not in own]
        if stray:
            parser.error(
                f"{stray[0]} is an option of {', '.join(MODEL_COMMANDS)}, not of {args.command}"
            )
    for dest, default in COMMON_DEFAULTS.items():
        if dest not in vars(args):
            setattr(args, dest, default)
    return args


def _unknown_option_before_command(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> str | None:
    """The first ``--flag`` before the command that names (or abbreviates) no option."""
    known = [name for action in parser._actions for name in action.option_strings]
    for token in argv:
        if token in COMMANDS:
            return None
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and not any(name.startswith(flag) for name in known):
            return token
    return None


def main(task_name: str, description: str, argv: Sequence[str] | None = None) -> int:
    args = parse(build_parser(task_name, description), sys.argv[1:] if argv is None else argv)
    try:
        with sigterm_as_interrupt():
            return _dispatch(task_name, args)
    except EvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: an unfinished run never replaces its --output", file=sys.stderr)
        return 130
    except Exception as exc:  # a full disk is one line, exit 1; anything else is a bug
        return report_disk_full(exc)


def _dispatch(task_name: str, args: argparse.Namespace) -> int:
    if args.command == "compare":
        return compare(args.base, args.trained, args.output, args.force)
    if args.command == "stats":
        records, _ = load_prompt_records(args.input)
        chosen = statistics.high_value_prompts(records, args.var_min, args.entropy_min)
        print(statistics.stats_markdown(records, chosen, args.var_min, args.entropy_min, args.top))
        return 0
    if args.command == "filter":
        written, total = filter_learnable(
            args.input, args.output, args.var_min, args.entropy_min, args.force
        )
        print(f"wrote {written} of {total} prompts to {args.output}")
        return 0
    return run_model_command(task_name, args)


# ---------------------------------------------------------------- one model eval


def run_model_command(task_name: str, args: argparse.Namespace) -> int:
    """One model eval, each stage once and in order: every input checked, cheapest first,
    before the model loads (docs/ERRORS.md lists what each command refuses)."""
    from rlvr import tasks

    task = tasks.get(task_name)
    if args.model_path is None:
        raise EvalError(f"{args.command} needs --model_path (a model folder or a hub id)")
    source = model.resolve_model(args.model_path, args.base_model)  # before data or torch
    output_dir = Path(args.output or default_output_dir(task_name, args.command, args.model_path))
    refuse_existing(output_dir, args.force, run=True)
    greedy_dir = greedy_output(args, output_dir)
    found = settings.eval_settings(task, args.experiment, args.reward_kwargs, args.template_kwargs)
    data_path = args.data or str(task.eval_data)
    rows = prompts.load_rows(data_path, args.limit, task)
    sampling = settings.sampling_settings(args, found)
    ks = settings.checked_ks(args.command, getattr(args, "k", None), sampling)
    model.check_context(source, sampling.max_tokens)
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
        generation_eos=model.generation_config_eos(
            source.base if source.kind == "lora" and source.base else source.path
        ),
    )
    summary = evaluate(args.command, run, rows, sampling, ks)
    if greedy_dir is not None:  # reward, exactly as it runs alone, on what is loaded
        greedy = SamplingSettings(max_tokens=sampling.max_tokens, seed=sampling.seed)
        chunk = prompts_per_chunk(backend.name, args.batch_size, greedy.n)
        evaluate(
            "reward", replace(run, output_dir=greedy_dir, prompts_per_chunk=chunk), rows, greedy
        )
    _print_run(summary, output_dir, greedy_dir)
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
    """Generation and grading, the command's statistics, and the run folder written whole;
    its sampling settings already checked (``settings.checked_ks``)."""
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


def run_reward(run: EvalRun, rows: Sequence[Row], sampling: SamplingSettings) -> Summary:
    """Greedy decoding, one response per prompt."""
    _check_library_call("reward", run, sampling)
    return evaluate("reward", run, rows, replace(sampling, n=1, temperature=0.0))


def run_passk(
    run: EvalRun, rows: Sequence[Row], sampling: SamplingSettings, ks: Sequence[int]
) -> Summary:
    """n samples per prompt; the unbiased pass@k for each k, and maj@k when the reward file
    names each response's answer (``answer_key``)."""
    _check_library_call("passk", run, sampling, ks)
    return evaluate("passk", run, rows, sampling, ks)


def run_analyse(run: EvalRun, rows: Sequence[Row], sampling: SamplingSettings) -> Summary:
    """n samples per prompt at a training-like temperature: is there a GRPO signal here?"""
    _check_library_call("analyse", run, sampling)
    return evaluate("analyse", run, rows, sampling)


def _check_library_call(
    command: str, run: EvalRun, sampling: SamplingSettings, ks: Sequence[int] = ()
) -> None:
    """For callers of ``run_*`` (not the CLI, which checks them before the model loads): the
    group size and k values, and the reward kwargs, before any decoding."""
    settings.check_group(command, sampling.n, ks)
    settings.check_reward_kwargs(run.task, run.reward_kwargs, "reward kwargs")


def _print_run(summary: Summary, output_dir: Path, greedy_dir: Path | None) -> None:
    print(summary_markdown(summary), end="")
    print(f"\nrun directory: {output_dir}")
    if greedy_dir is not None:
        print(f"greedy run directory: {greedy_dir}")


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


# ---------------------------------------------------------------- run folders read back


def compare(base: str, trained: str, output: str | None, force: bool) -> int:
    """The two runs side by side; the per-prompt means with their paired 95% intervals. Runs
    that differ in anything but the model are refused (``statistics.check_comparable``)."""
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
        statistics.EvalRunSamples.load(path if Path(path).is_dir() else Path(path).parent, summary)
        for path, summary in zip((base, trained), summaries, strict=True)
    )
    warnings = statistics.check_comparable(before, after)
    count = len(before.prompts)
    deltas = statistics.deltas_between(before, after) if count > 1 else []
    table = statistics.compare_markdown(*summaries, deltas)
    if count < 2:
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
    chosen = statistics.high_value_prompts(records, var_min, entropy_min)
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

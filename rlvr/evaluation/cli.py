"""The command line of ``scripts/eval_countdown.py``, ``scripts/eval_gsm8k.py`` and ``python -m
rlvr.evaluation``: a model command runs ``pipeline.run_model_command``; ``compare``, ``stats``
and ``filter`` read run folders back (``statistics.compare``, ``run_folder.filter_learnable``).

The options of ``COMMON_OPTIONS`` come before the command (main parser) or after it (a parent of
each model command), each copy with no default: ``parse`` fills them in. No command: ``reward``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from rlvr.common.cli import OneLineParser, float_in, int_in
from rlvr.common.files import report_disk_full
from rlvr.common.signals import interrupt_behind, quiet_finalizers, sigterm_as_interrupt
from rlvr.evaluation import EvalError, metrics, settings, statistics
from rlvr.evaluation.pipeline import run_model_command
from rlvr.evaluation.run_folder import filter_learnable, load_prompt_records

COMMANDS = ("reward", "passk", "analyse", "stats", "filter", "compare")
MODEL_COMMANDS = ("reward", "passk", "analyse")
DEFAULT_COMMAND = "reward"
Subcommands = argparse._SubParsersAction  # what add_subparsers returns


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
    _option("--limit", "evaluate the first N prompts only", type=settings.positive_int),
    _option("--seed", "sampling seed (%(default)s)", default=0, type=int_in(0, 2**32 - 1)),
    _option(
        "--max_tokens",
        "max new tokens per response (default: the experiment's max_response_length)",
        type=int_in(1, settings.MAX_TOKENS),
    ),
    _option(
        "--batch_size",
        "sequences the HF backend decodes together (%(default)s; vLLM batches itself)",
        default=16,
        type=int_in(1, settings.MAX_BATCH),
    ),
    _option(
        "--dtype",
        "the HF backend's compute dtype (%(default)s: bfloat16 on CUDA, float32 on a CPU); "
        "bf16 and fp32 draw other samples",
        default="auto",
        choices=("auto", "float32", "bfloat16"),
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
    _option("--reward_kwargs", "JSON object overriding reward kwargs", type=settings.json_flag),
    _option(
        "--template_kwargs",
        "JSON object for apply_chat_template, e.g. '{\"enable_thinking\": false}'",
        type=settings.json_flag,
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
        type=settings.temperature_flag,
        help=f"sampling temperature, {settings.MIN_TEMPERATURE} to {settings.MAX_TEMPERATURE:g} "
        "(0: greedy, --n 1 only); default: the experiment's rollout temperature, else 1.0",
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
        type=int_in(1, settings.MAX_SAMPLES),
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
        "--k", type=settings.k_list, help="k values, each <= n (default: 1,4,8,16 up to n, and n)"
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
            default=metrics.VARIANCE_MIN,
            help="keep prompts with reward variance above this (%(default)s)",
        )
        sub.add_argument(
            "--entropy_min",
            type=float_in(0.0, 1.0),
            default=metrics.ENTROPY_RANGE[0],
            help="and outcome entropy (bits) at least this (%(default)s)",
        )
        if name == "stats":
            sub.add_argument(
                "--top", type=settings.positive_int, default=20, help="rows to list (%(default)s)"
            )
        else:
            sub.add_argument(  # required, checked in parse: it may also come before filter
                "--output",
                default=argparse.SUPPRESS,
                help="Parquet to write, e.g. artifacts/data/countdown/train_learnable.parquet",
            )
    compare = commands.add_parser(
        "compare",
        help="two runs side by side, deltas with paired 95%% intervals; runs on other prompts or "
        "settings are refused",
    )
    compare.add_argument("base", help="run folder or summary.json of the base model")
    compare.add_argument("trained", help="run folder or summary.json of the trained model")
    compare.add_argument("--output", default=argparse.SUPPRESS, help="also write the table here")
    for writer in (sub, compare):  # filter (the loop's last) and compare: --force, no default
        writer.add_argument(
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
        return _interrupted()
    except Exception as exc:  # a full disk is one line, exit 1; anything else is a bug
        if interrupt_behind(exc) is not None:
            return _interrupted()  # Ctrl-C that a library's clean-up turned into its own error
        return report_disk_full(exc)


def _interrupted() -> int:
    quiet_finalizers()  # before the except block ends and the cut-short frames are freed
    print("interrupted: an unfinished run never replaces its --output", file=sys.stderr)
    return 130


def _dispatch(task_name: str, args: argparse.Namespace) -> int:
    if args.command == "compare":
        return statistics.compare(args.base, args.trained, args.output, args.force)
    if args.command == "stats":
        records, _ = load_prompt_records(args.input)
        chosen = metrics.high_value_prompts(records, args.var_min, args.entropy_min)
        print(statistics.stats_markdown(records, chosen, args.var_min, args.entropy_min, args.top))
        return 0
    if args.command == "filter":
        written, total = filter_learnable(
            args.input, args.output, args.var_min, args.entropy_min, args.force
        )
        print(f"wrote {written} of {total} prompts to {args.output}")
        return 0
    return run_model_command(task_name, args)

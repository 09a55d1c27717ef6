"""The command line shared by ``scripts/eval_countdown.py`` and ``scripts/eval_gsm8k.py``.

The model commands (``reward``, ``passk``, ``analyse``) own the common options, each default
stated once, in ``COMMON_OPTIONS``. Common options may also come before the command
(``--model_path X analyse`` and ``analyse --model_path X`` both work): ``command_first`` moves
them after it before argparse reads the line. With no command, ``reward`` runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.evaluation import metrics
from rlvr.evaluation.errors import EvalError

COMMANDS = ("reward", "passk", "analyse", "stats", "filter", "compare")
MODEL_COMMANDS = ("reward", "passk", "analyse")
DEFAULT_COMMAND = "reward"
HELP = ("-h", "--help")
Subcommands = argparse._SubParsersAction  # what add_subparsers returns


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"format_score\": 0.1}'")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _k_list(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers") from exc
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: k values must be positive")
    return ks


@dataclass(frozen=True)
class Option:
    """One common option; ``{task}`` in its help becomes the task's name."""

    name: str
    help: str
    default: object = None
    type: Callable[[str], object] | None = None
    choices: tuple[str, ...] | None = None
    switch: bool = False  # store_true: takes no value

    def add_to(self, parser: argparse.ArgumentParser, task: str) -> None:
        text = self.help.replace("{task}", task)
        if self.switch:
            parser.add_argument(self.name, action="store_true", help=text)
            return
        settings: dict[str, Any] = {"default": self.default, "help": text}
        if self.type is not None:
            settings["type"] = self.type
        if self.choices is not None:
            settings["choices"] = self.choices
        parser.add_argument(self.name, **settings)


COMMON_OPTIONS = (
    Option(
        "--model_path",
        "HF model folder (e.g. .../global_step_N/actor/huggingface), a LoRA adapter folder "
        "(loaded onto its base) or a hub id",
    ),
    Option("--base_model", "base model for a LoRA adapter (default: the adapter's own record)"),
    Option("--data", "data-prep Parquet (default artifacts/data/{task}/test.parquet)"),
    Option("--limit", "evaluate the first N prompts only", type=_positive_int),
    Option("--seed", "sampling seed (%(default)s)", default=0, type=int),
    Option(
        "--max_tokens",
        "max new tokens per response (default: the task's max_response_length)",
        type=_positive_int,
    ),
    Option(
        "--batch_size",
        "sequences the HF backend decodes together (%(default)s; vLLM batches itself)",
        default=16,
        type=_positive_int,
    ),
    Option(
        "--backend",
        "%(default)s: vLLM when CUDA and the gpu extra are there, else the HF backend",
        default="auto",
        choices=("auto", "vllm", "hf"),
    ),
    Option(
        "--output",
        "run folder (default artifacts/eval/{task}_<command>_<model>); written whole at the "
        "end, an existing one is refused without --force",
    ),
    Option("--force", "replace an existing --output, once the new run has completed", switch=True),
    Option(
        "--experiment",
        "take reward and chat-template kwargs from this training experiment "
        "(default: the task overlay's reward kwargs, no template kwargs)",
    ),
    Option("--reward_kwargs", "JSON object overriding reward kwargs", type=_json_object),
    Option(
        "--template_kwargs",
        "JSON object for apply_chat_template, e.g. '{\"enable_thinking\": false}'",
        type=_json_object,
    ),
    Option(
        "--wandb",
        "log the summary and a generations table (offline unless WANDB_API_KEY is set)",
        switch=True,
    ),
    Option("--wandb_project", "WandB project (%(default)s)", default="rlvr-recipes-eval"),
    Option("--quiet", "no progress bar", switch=True),
)


def _takes_value(token: str) -> bool:
    """Whether a common option (or an unambiguous prefix of one) reads the next token."""
    if "=" in token:
        return False
    matches = [o for o in COMMON_OPTIONS if o.name == token] or [
        o for o in COMMON_OPTIONS if o.name.startswith(token)
    ]
    return bool(matches) and not matches[0].switch


def command_first(argv: Sequence[str]) -> list[str]:
    """``argv`` with the command first: the options before it move after it, and with no
    command at all, ``reward`` is the command. Help, or a word that is not a command, is left
    for argparse to answer."""
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in HELP:
        i += 2 if _takes_value(argv[i]) else 1
    before, rest = list(argv[:i]), list(argv[i:])
    if not rest:
        return [DEFAULT_COMMAND, *before]
    if rest[0] in COMMANDS:
        return [rest[0], *before, *rest[1:]]
    return list(argv)


def _add_sampling_options(parser: argparse.ArgumentParser, *n_aliases: str) -> None:
    add = parser.add_argument
    add(
        "--temperature",
        type=float,
        default=1.0,
        help="sampling temperature; use training's rollout temperature (%(default)s)",
    )
    add("--top_p", type=float, default=1.0, help="nucleus sampling (%(default)s)")
    alias = f"; {', '.join(n_aliases)} is an alias" if n_aliases else ""
    add(
        "--n",
        *n_aliases,
        dest="n",
        type=_positive_int,
        default=16,
        help=f"samples per prompt, like GRPO's rollout.n (%(default)s){alias}",
    )


def _add_model_commands(commands: Subcommands, task: str) -> None:
    common = argparse.ArgumentParser(add_help=False)
    for option in COMMON_OPTIONS:
        option.add_to(common, task)
    commands.add_parser(
        "reward",
        parents=[common],
        help="greedy decoding: mean score, pass@1, format rate, mean response length",
    )
    passk = commands.add_parser("passk", parents=[common], help="unbiased pass@k from n samples")
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
            type=float,
            default=metrics.VARIANCE_MIN,
            help="keep prompts with reward variance above this (%(default)s)",
        )
        sub.add_argument(
            "--entropy_min",
            type=float,
            default=metrics.ENTROPY_RANGE[0],
            help="and outcome entropy (bits) at least this (%(default)s)",
        )
        if name == "stats":
            sub.add_argument(
                "--top", type=_positive_int, default=20, help="rows to list (%(default)s)"
            )
        else:
            sub.add_argument(
                "--output",
                required=True,
                help="Parquet to write, e.g. artifacts/data/countdown/train_learnable.parquet",
            )
            sub.add_argument("--force", action="store_true", help="replace an existing --output")
    compare = commands.add_parser("compare", help="Markdown table of two runs with deltas")
    compare.add_argument("base", help="run folder or summary.json of the base model")
    compare.add_argument("trained", help="run folder or summary.json of the trained model")
    compare.add_argument("--output", help="also write the table here")
    compare.add_argument("--force", action="store_true", help="replace an existing --output")


def build_parser(task: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"commands (default {DEFAULT_COMMAND}): {', '.join(COMMANDS)}; see COMMAND --help.\n"
        f"The options of {', '.join(MODEL_COMMANDS)} may also come before the command.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_model_commands(commands, task)
    _add_run_commands(commands)
    return parser


def main(task_name: str, description: str, argv: Sequence[str] | None = None) -> int:
    parser = build_parser(task_name, description)
    args = parser.parse_args(command_first(sys.argv[1:] if argv is None else argv))
    try:
        return _dispatch(task_name, args)
    except EvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _dispatch(task_name: str, args: argparse.Namespace) -> int:
    from rlvr.evaluation import commands

    if args.command == "compare":
        return commands.compare(args.base, args.trained, args.output, args.force)
    if args.command == "stats":
        return commands.stats(args.input, args.var_min, args.entropy_min, args.top)
    if args.command == "filter":
        return commands.filter_prompts(
            args.input, args.output, args.var_min, args.entropy_min, args.force
        )
    return commands.run_model_command(task_name, args)

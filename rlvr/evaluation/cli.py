"""The command line shared by ``scripts/eval_countdown.py`` and ``scripts/eval_gsm8k.py``.

Common options may come before or after the command (``--model_path X analyse`` and
``analyse --model_path X`` both work); with no command, ``reward`` runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlvr.evaluation.errors import EvalError
from rlvr.evaluation.generation import SamplingSettings

COMMANDS = ("reward", "passk", "analyse", "stats", "filter", "compare")
MODEL_COMMANDS = ("reward", "passk", "analyse")

# Defaults of the options shared by the model commands (None = taken from the task or model).
COMMON_DEFAULTS: dict[str, Any] = {
    "model_path": None,
    "base_model": None,
    "data": None,
    "limit": None,
    "seed": 0,
    "max_tokens": None,
    "batch_size": 16,
    "backend": "auto",
    "output": None,
    "experiment": None,
    "reward_kwargs": None,
    "template_kwargs": None,
    "wandb": False,
    "wandb_project": "rlvr-recipes-eval",
    "quiet": False,
}


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


def _common_options(task: str) -> argparse.ArgumentParser:
    # SUPPRESS: an option given before the command is not reset by the command's parser.
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    add = common.add_argument
    add(
        "--model_path",
        help="HF model folder (e.g. .../global_step_N/actor/huggingface), a "
        "LoRA adapter folder (loaded onto its base) or a hub id",
    )
    add("--base_model", help="base model for a LoRA adapter (default: the adapter's own record)")
    add("--data", help=f"data-prep Parquet (default artifacts/data/{task}/test.parquet)")
    add("--limit", type=_positive_int, help="evaluate the first N prompts only")
    add("--seed", type=int, help="sampling seed (default 0)")
    add(
        "--max_tokens",
        type=_positive_int,
        help="max new tokens per response (default: the task's max_response_length)",
    )
    add(
        "--batch_size",
        type=_positive_int,
        help="sequences the HF backend decodes together (default 16; vLLM batches itself)",
    )
    add(
        "--backend",
        choices=("auto", "vllm", "hf"),
        help="auto (default): vLLM when CUDA and the gpu extra are there, else the HF backend",
    )
    add("--output", help=f"run directory (default artifacts/eval/{task}_<command>_<model>)")
    add(
        "--experiment",
        help="take reward and chat-template kwargs from this training experiment "
        "(default: the task overlay's reward kwargs, no template kwargs)",
    )
    add("--reward_kwargs", type=_json_object, help="JSON object overriding reward kwargs")
    add(
        "--template_kwargs",
        type=_json_object,
        help="JSON object for apply_chat_template, e.g. '{\"enable_thinking\": false}'",
    )
    add(
        "--wandb",
        action="store_true",
        help="log the summary and a generations table (offline unless WANDB_API_KEY is set)",
    )
    add("--wandb_project", help="WandB project (default rlvr-recipes-eval)")
    add("--quiet", action="store_true", help="no progress bar")
    return common


def build_parser(task: str, description: str) -> argparse.ArgumentParser:
    common = _common_options(task)
    parser = argparse.ArgumentParser(
        description=description,
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands (default reward): " + ", ".join(COMMANDS) + "; see COMMAND --help",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    sampling = argparse.ArgumentParser(add_help=False)  # the sampling commands' own options
    sampling.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="sampling temperature; use training's rollout temperature (1.0)",
    )
    sampling.add_argument("--top_p", type=float, default=1.0, help="nucleus sampling (1.0)")

    commands.add_parser(
        "reward",
        parents=[common],
        help="greedy decoding: mean score, pass@1, format rate, mean response length",
    )

    passk = commands.add_parser(
        "passk", parents=[common, sampling], help="unbiased pass@k from n samples"
    )
    passk.add_argument("--n", type=_positive_int, default=16, help="samples per prompt (16)")
    passk.add_argument(
        "--k",
        type=_k_list,
        default=None,
        help="k values, each <= n (default: 1,4,8,16 up to n, and n)",
    )

    analyse = commands.add_parser(
        "analyse",
        parents=[common, sampling],
        help="signal probe: per-prompt variance and entropy, verdict",
    )
    analyse.add_argument(
        "--rollout_n",
        type=_positive_int,
        default=16,
        help="samples per prompt, like GRPO's rollout.n (16)",
    )

    for name, text in (
        ("stats", "list the high-value prompts of an analyse run"),
        ("filter", "write the learnable prompts of an analyse run as a training Parquet"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--input", required=True, help="an analyse run directory")
        sub.add_argument(
            "--var_min",
            type=float,
            default=0.05,
            help="keep prompts with reward variance above this (0.05)",
        )
        sub.add_argument(
            "--entropy_min",
            type=float,
            default=0.2,
            help="and outcome entropy (bits) at least this (0.2)",
        )
        if name == "stats":
            sub.add_argument("--top", type=_positive_int, default=20, help="rows to list (20)")
        else:
            sub.add_argument(
                "--output",
                dest="filter_output",
                required=True,
                help="Parquet to write, e.g. artifacts/data/countdown/train_learnable.parquet",
            )

    compare = commands.add_parser("compare", help="Markdown table of two runs with deltas")
    compare.add_argument("base", help="run directory or summary.json of the base model")
    compare.add_argument("trained", help="run directory or summary.json of the trained model")
    compare.add_argument("--output", dest="compare_output", help="also write the table here")
    return parser


def main(task_name: str, description: str, argv: list[str] | None = None) -> int:
    parser = build_parser(task_name, description)
    args = parser.parse_args(argv)
    for key, value in COMMON_DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, value)
    args.command = args.command or "reward"
    try:
        return _dispatch(task_name, args)
    except EvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _dispatch(task_name: str, args: argparse.Namespace) -> int:
    from rlvr.evaluation import runs as evaluation

    if args.command == "compare":
        base, trained = evaluation.load_summary(args.base), evaluation.load_summary(args.trained)
        table = evaluation.compare_markdown(base, trained)
        print(table, end="")
        if args.compare_output:
            Path(args.compare_output).write_text(table)
        return 0
    if args.command == "stats":
        records, _ = evaluation.load_prompt_records(args.input)
        chosen = evaluation.high_value_prompts(records, args.var_min, args.entropy_min)
        print(evaluation.stats_markdown(records, chosen, args.var_min, args.entropy_min, args.top))
        return 0
    if args.command == "filter":
        written, total = evaluation.filter_learnable(
            args.input, args.filter_output, args.var_min, args.entropy_min
        )
        print(f"wrote {written} of {total} prompts to {args.filter_output}")
        return 0
    return _run_model_command(task_name, args)


def _run_model_command(task_name: str, args: argparse.Namespace) -> int:
    from rlvr import tasks
    from rlvr.evaluation import runs as evaluation
    from rlvr.evaluation.generation import make_backend, resolve_model

    task = tasks.get(task_name)
    if args.model_path is None:
        raise EvalError(f"{args.command} needs --model_path")
    source = resolve_model(args.model_path, args.base_model)  # fails fast, before data or torch
    data_path = args.data or str(task.eval_data)
    rows = evaluation.load_rows(data_path, args.limit)

    reward_kwargs, max_response_length = task.training_settings()
    template_kwargs: dict[str, Any] = {}
    if args.experiment:
        reward_kwargs, template_kwargs = evaluation.experiment_settings(args.experiment)
    reward_kwargs.update(args.reward_kwargs or {})
    template_kwargs.update(args.template_kwargs or {})

    n = {"passk": getattr(args, "n", 1), "analyse": getattr(args, "rollout_n", 1)}.get(
        args.command, 1
    )
    sampling = SamplingSettings(
        n=n,
        temperature=getattr(args, "temperature", 0.0),
        top_p=getattr(args, "top_p", 1.0),
        max_tokens=args.max_tokens or max_response_length,
        seed=args.seed,
    )
    output_dir = Path(
        args.output or evaluation.default_output_dir(task_name, args.command, args.model_path)
    )
    backend = make_backend(args.backend, source, batch_size=args.batch_size)
    run = evaluation.EvalRun(
        task=task,
        model_path=args.model_path,
        data_path=data_path,
        output_dir=output_dir,
        backend=backend,
        reward_kwargs=reward_kwargs,
        template_kwargs=template_kwargs,
        # HF: enough prompts to fill a generate batch; vLLM: large chunks, it schedules itself.
        prompts_per_chunk=max(1, args.batch_size // n) if backend.name == "hf" else 256,
        progress=not args.quiet,
    )
    if args.command == "reward":
        summary = evaluation.run_reward(run, rows, sampling)
    elif args.command == "passk":
        ks = args.k or sorted({k for k in (1, 4, 8, 16) if k <= n} | {n})
        summary = evaluation.run_passk(run, rows, sampling, ks)
    else:
        summary = evaluation.run_analyse(run, rows, sampling)
    print(evaluation.summary_markdown(summary), end="")
    print(f"\nrun directory: {output_dir}")
    if args.wandb:
        mode = evaluation.log_to_wandb(run, summary, args.wandb_project)
        print(f"wandb: logged ({mode}) under {output_dir / 'wandb'}")
    return 0

"""The Countdown recipes the quickstart runs on GPUs, and the one that fits a machine.

A recipe's GPU count is read from its composed config (``trainer.n_gpus_per_node`` x
``trainer.nnodes``, what verl's trainer asks Ray for), so it is never written twice. Of the
recipes this many GPUs can run, the one needing the most is chosen; GPUs it leaves idle are named
in the explanation, with the recipe that would need more.

``python -m rlvr.planning.gpu_recipes [--gpus N]`` prints the chosen experiment on stdout and one
line about the choice on stderr (scripts/quickstart.sh reads it); without --gpus it counts this
machine's GPUs (torch.cuda.device_count()). Exit 1 when no recipe fits, 2 on a config error.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from rlvr.common.paths import CONFIG_DIR
from rlvr.config.compose import ConfigError, compose_checked

MAX_GPUS = 9999  # what scripts/quickstart.sh's --gpus accepts
# The candidates, any order: the 8-GPU recipe and the single-GPU LoRA one.
GPU_RECIPES = ("countdown_qwen3_4b", "countdown_qwen2_5_3b_lora_1gpu")


class NoRecipeFits(ValueError):
    """This many GPUs run none of the recipes; the message is one line."""


@dataclass(frozen=True)
class Choice:
    experiment: str
    gpus_used: int
    gpus_found: int
    explanation: str  # one line: what runs on how many of the GPUs, and why not more


def gpus_needed(experiment: str) -> int:
    """GPUs the experiment's composed config asks for (all nodes)."""
    if not (CONFIG_DIR / f"{experiment}.yaml").is_file():
        raise ConfigError(
            f"GPU recipe {experiment}: configs/{experiment}.yaml is missing "
            "(a candidate in rlvr/planning/gpu_recipes.py GPU_RECIPES)"
        )
    trainer = compose_checked(experiment).trainer
    return int(trainer.n_gpus_per_node) * int(trainer.nnodes)


def choose(gpus: int) -> Choice:
    """The recipe needing the most GPUs that ``gpus`` GPUs can run."""
    needs = sorted((gpus_needed(name), name) for name in GPU_RECIPES)
    fitting = [(need, name) for need, name in needs if need <= gpus]
    if not fitting:
        least, smallest = needs[0]
        raise NoRecipeFits(
            f"{_gpus(gpus)}: every GPU recipe needs at least {least} ({smallest}); "
            "without GPUs the quickstart runs its CPU path (--gpus 0)"
        )
    used, experiment = fitting[-1]
    larger = [(need, name) for need, name in needs if need > gpus]
    if used == gpus:
        why = f"uses all {gpus}" if gpus > 1 else "uses it"
    elif larger:
        why = f"uses {used} of {gpus} ({larger[0][1]} needs {larger[0][0]})"
    else:
        why = f"uses {used} of {gpus} (no GPU recipe needs more)"
    return Choice(experiment, used, gpus, f"{_gpus(gpus)}: {experiment} {why}")


def recipe_for(gpus: int) -> str:
    """The experiment name ``choose`` picks for this many GPUs."""
    return choose(gpus).experiment


def detected_gpus() -> int:
    import torch

    return int(torch.cuda.device_count())


def _gpus(count: int) -> str:
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def main(argv: Sequence[str] | None = None) -> int:
    from rlvr.common.cli import OneLineParser, int_in

    parser = OneLineParser(
        prog="python -m rlvr.planning.gpu_recipes",
        description="Print the Countdown GPU recipe that fits this many GPUs.",
    )
    parser.add_argument(
        "--gpus",
        type=int_in(0, MAX_GPUS),
        metavar="N",
        help="GPUs to plan for (default: this machine's, torch's count)",
    )
    args = parser.parse_args(argv)
    gpus = detected_gpus() if args.gpus is None else args.gpus
    try:
        choice = choose(gpus)
    except NoRecipeFits as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(choice.explanation, file=sys.stderr)
    print(choice.experiment)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

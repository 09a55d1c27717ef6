"""Write Countdown tasks as verl-schema Parquet: artifacts/data/countdown/{train,test}.parquet.

Usage: uv run scripts/data_prep_countdown.py [--source hf|generate|PATH]
           [--template chat|think|fewshot]

Sources: `hf` loads Jiayi-Pan/Countdown-Tasks-3to4 (or --dataset) from the hub; a PATH is a local
.jsonl/.json/.parquet/.csv with `nums` and `target` columns, or a local dataset folder; `generate`
builds solvable tasks offline. Split (from the seed guide): test = the first --test_size rows,
train = the rest shuffled with --seed; train rows whose (numbers, target) is in test are dropped.
Exit code 2 on bad input, and nothing is written.
"""

from __future__ import annotations

import argparse

from rlvr.data.prep import run_prep_cli
from rlvr.tasks.countdown import HUB_DATASET, TEMPLATES, GeneratorSpec, prepare


def int_pair(text: str) -> tuple[int, int]:
    try:
        low, high = (int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected two integers like 3,4") from None
    return low, high


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--source", default="hf", help="hf, generate, or a local file/folder path")
    parser.add_argument("--dataset", default=HUB_DATASET, help="hub dataset name for --source hf")
    parser.add_argument("--local_dir", default="artifacts/data/countdown", help="output folder")
    parser.add_argument(
        "--template",
        default="chat",
        choices=TEMPLATES,
        help="chat: system+user for instruct models; think: reason in <think> first "
        "(Qwen3-style); fewshot: the seed's worked example prepended",
    )
    parser.add_argument(
        "--train_size",
        type=int,
        default=None,
        help="cap on train rows (generate: how many to make, default 10000)",
    )
    parser.add_argument("--test_size", type=int, default=1024, help="test rows: the first N tasks")
    parser.add_argument("--seed", type=int, default=42, help="train shuffle and generator seed")
    parser.add_argument(
        "--num_range",
        type=int_pair,
        default=(3, 4),
        help="generate: numbers per task, low,high inclusive",
    )
    parser.add_argument("--max_number", type=int, default=99, help="generate: largest number")
    parser.add_argument(
        "--target_range",
        type=int_pair,
        default=(1, 100),
        help="generate: target low,high inclusive",
    )
    parser.add_argument(
        "--require_solvable",
        action="store_true",
        help="hub/file sources: drop tasks with no exact solution, and count them",
    )
    args = parser.parse_args(argv)

    def call():  # GeneratorSpec and prepare raise DataPrepError on bad input
        generator = GeneratorSpec(args.num_range, args.max_number, args.target_range, args.seed)
        return prepare(
            args.source,
            args.local_dir,
            dataset=args.dataset,
            template=args.template,
            train_size=args.train_size,
            test_size=args.test_size,
            seed=args.seed,
            generator=generator,
            require_solvable=args.require_solvable,
        )

    return run_prep_cli(call)


if __name__ == "__main__":
    raise SystemExit(main())

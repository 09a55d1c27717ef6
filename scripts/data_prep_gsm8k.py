"""Write GSM8K as verl-schema Parquet: artifacts/data/gsm8k/{train,test[,val]}.parquet.

Usage: uv run scripts/data_prep_gsm8k.py [--source hf|PATH] [--template chat|think] [--val_size N]

Sources: `hf` loads openai/gsm8k (config `main`); a PATH is a local .jsonl/.json/.parquet/.csv with
`question` and `answer` (GSM8K's format: reasoning, then `#### <number>`) used as the train split,
or a local dataset folder with train/test splits. The ground truth is the number after `####`,
commas removed. --val_size carves a validation split out of train so checkpoints are not picked
on test. Exit code 2 on bad input, and nothing is written.
"""

from __future__ import annotations

import argparse

from rlvr.data.prep import run_prep_cli
from rlvr.tasks.gsm8k import TEMPLATES, prepare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--source", default="hf", help="hf, or a local file/folder path")
    parser.add_argument("--local_dir", default="artifacts/data/gsm8k", help="output folder")
    parser.add_argument(
        "--template",
        default="chat",
        choices=TEMPLATES,
        help="chat: step by step, answer after ####; think: reason in <think> first",
    )
    parser.add_argument("--train_size", type=int, default=None, help="cap on train rows")
    parser.add_argument(
        "--test_size",
        type=int,
        default=None,
        help="cap on test rows; with a source that has no test split, the first N rows",
    )
    parser.add_argument(
        "--val_size", type=int, default=0, help="validation rows carved out of train"
    )
    parser.add_argument("--seed", type=int, default=42, help="train shuffle seed")
    parser.add_argument(
        "--skip_bad_rows",
        action="store_true",
        help="skip rows whose answer has no parsable number (and count them) instead of failing",
    )
    args = parser.parse_args(argv)

    def call():
        return prepare(
            args.source,
            args.local_dir,
            template=args.template,
            train_size=args.train_size,
            test_size=args.test_size,
            val_size=args.val_size,
            seed=args.seed,
            skip_bad_rows=args.skip_bad_rows,
        )

    return run_prep_cli(call)


if __name__ == "__main__":
    raise SystemExit(main())

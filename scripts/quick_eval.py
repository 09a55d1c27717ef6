"""Greedy eval of a model folder on a data-prep Parquet, or a before/after table of two results.

Usage: uv run scripts/quick_eval.py --model_path DIR --data FILE [--limit N] [--output FILE.json]
       uv run scripts/quick_eval.py --compare BEFORE.json AFTER.json

Prompts render as verl renders them in training; each response is graded by the task's reward
module. (The full eval and signal-probing CLIs are eval_countdown / eval_gsm8k.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlvr.evaluation import comparison_table, evaluate_greedy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model_path", help="HF model folder, e.g. .../global_step_N/actor/huggingface"
    )
    parser.add_argument(
        "--data", help="Parquet from data prep, e.g. artifacts/data/countdown/test.parquet"
    )
    parser.add_argument("--limit", type=int, default=None, help="first N prompts only")
    parser.add_argument("--max_tokens", type=int, default=64, help="max new tokens per response")
    parser.add_argument("--batch_size", type=int, default=16, help="prompts generated together")
    parser.add_argument("--output", help="write the summary JSON here")
    parser.add_argument(
        "--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="print a table of two summaries"
    )
    args = parser.parse_args(argv)

    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        print(comparison_table(before, after))
        return 0
    for flag, value in (("--model_path", args.model_path), ("--data", args.data)):
        if not value or not Path(value).exists():
            print(f"error: {flag} {value!r} does not exist", file=sys.stderr)
            return 2
    summary = evaluate_greedy(
        args.model_path,
        args.data,
        limit=args.limit,
        max_new_tokens=args.max_tokens,
        batch_size=args.batch_size,
    ).as_dict()
    print(json.dumps(summary, indent=2))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

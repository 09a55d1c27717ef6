"""Write Countdown tasks as verl-schema Parquet: artifacts/data/countdown/{train,test}.parquet.

Usage: uv run scripts/data_prep_countdown.py [--source hf|generate|PATH]
           [--template chat|think|fewshot]

Sources: `hf` loads Jiayi-Pan/Countdown-Tasks-3to4 (or --dataset) from the hub; a PATH is a local
.jsonl/.json/.parquet/.csv with `nums` and `target` columns, or a local dataset folder; `generate`
builds solvable tasks offline. Split (TuFT's Countdown RL guide, github.com/agentscope-ai/TuFT,
docs/sphinx_doc/source/user-guide/countdown-rl.md): test = the first --test_size rows, train =
the rest shuffled with --seed; train rows whose (numbers, target) is in test are dropped.
Tasks the reward cannot grade (over 16 numbers, numbers or targets of 10^9 or more) are refused.
Exit code 2 on bad input, and nothing is written.
"""

from rlvr.tasks.prep_cli import main

if __name__ == "__main__":
    raise SystemExit(main("countdown", description=__doc__))

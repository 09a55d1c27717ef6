"""Write GSM8K as verl-schema Parquet: artifacts/data/gsm8k/{train,test[,val]}.parquet.

Usage: uv run scripts/data_prep_gsm8k.py [--source hf|PATH] [--template chat|think] [--val_size N]

Sources: `hf` loads openai/gsm8k (config `main`); a PATH is a local .jsonl/.json/.parquet/.csv with
`question` and `answer` (GSM8K's format: reasoning, then `#### <number>`) used as the train split,
or a local dataset folder with train/test splits. The ground truth is the number after `####`,
read by the reward's own parser (`#### 1,2,14` is refused, not turned into 1214); train rows
whose question is also in test are dropped. --val_size carves a validation split out of train so
checkpoints are not picked on test; a rerun without it removes an old val.parquet.
Exit code 2 on bad input, and nothing is written.
"""

from rlvr.tasks.prep_cli import main

if __name__ == "__main__":
    raise SystemExit(main("gsm8k", description=__doc__))

"""Evaluate and probe a model on Countdown: reward, pass@k, GRPO signal, prompt filtering.

Usage: uv run scripts/eval_countdown.py --model_path DIR [--limit N] [COMMAND [options]]
  reward   greedy: mean score, pass@1, format rate, mean response length (the default)
  passk    --n 16 --k 1,4,8,16: unbiased pass@k and maj@k (majority vote)
  analyse  --n 16 (alias --rollout_n): per-prompt variance and entropy, and whether GRPO can learn
  stats    --input RUN: the high-value prompts of an analyse run
  filter   --input RUN --output FILE.parquet: those prompts as training data
  compare  BASE TRAINED: two runs side by side, deltas with paired 95% intervals
The options of reward/passk/analyse may come before or after the command. A run folder
(--output) is written whole at the end; an existing one is refused unless --force is given,
which replaces it once the new run has completed (the same for compare/filter --output).

Example: uv run scripts/eval_countdown.py --limit 100 \\
    --model_path artifacts/checkpoints/countdown/global_step_100/actor/huggingface reward
"""

from rlvr.evaluation.cli import main

if __name__ == "__main__":
    raise SystemExit(main("countdown", __doc__))

"""Evaluate and probe a model on Countdown: reward, pass@k, GRPO signal, prompt filtering.

Usage: uv run scripts/eval_countdown.py --model_path DIR [--limit N] [COMMAND [options]]
  reward   greedy: mean score, pass@1, format rate, mean response length (the default)
  passk    --n 16 --k 1,4,8,16: unbiased pass@k
  analyse  --rollout_n 16: per-prompt variance and entropy, and whether GRPO can learn here
  stats    --input RUN: the high-value prompts of an analyse run
  filter   --input RUN --output FILE.parquet: those prompts as training data
  compare  BASE TRAINED: a Markdown table of two runs with deltas

Example: uv run scripts/eval_countdown.py --limit 100 \\
    --model_path artifacts/checkpoints/countdown/global_step_100/actor/huggingface reward
"""

from rlvr.evaluation.cli import main

if __name__ == "__main__":
    raise SystemExit(main("countdown", __doc__))

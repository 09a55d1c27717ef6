#!/usr/bin/env bash
# GRPO on countdown: the task's default experiment unless --config names another.
# Usage: bash scripts/run_grpo_countdown.sh [--config EXPERIMENT] [hydra overrides...]
#   e.g. bash scripts/run_grpo_countdown.sh base_model=qwen2_5_3b trainer.total_training_steps=50
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_grpo.sh" countdown "$@"

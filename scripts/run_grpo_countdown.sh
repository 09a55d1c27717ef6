#!/usr/bin/env bash
# GRPO on countdown: the countdown_qwen3_4b experiment unless --config names another.
# Usage: bash scripts/run_grpo_countdown.sh [--config EXPERIMENT] [hydra overrides...]
#   e.g. bash scripts/run_grpo_countdown.sh base_model=qwen2_5_3b trainer.total_training_steps=50
set -euo pipefail
EXPERIMENT=countdown_qwen3_4b
if [[ "${1:-}" == "--config" ]]; then EXPERIMENT="${2:?--config needs a name}"; shift 2; fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch_grpo.sh" "$EXPERIMENT" "$@"

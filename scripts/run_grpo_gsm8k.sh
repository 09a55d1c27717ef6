#!/usr/bin/env bash
# GRPO on gsm8k: the gsm8k_qwen2_5_3b experiment unless --config names another.
# Usage: bash scripts/run_grpo_gsm8k.sh [--config EXPERIMENT] [hydra overrides...]
#   e.g. bash scripts/run_grpo_gsm8k.sh base_model=qwen2_5_3b trainer.total_training_steps=50
set -euo pipefail
EXPERIMENT=gsm8k_qwen2_5_3b
if [[ "${1:-}" == "--config" ]]; then EXPERIMENT="${2:?--config needs a name}"; shift 2; fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch_grpo.sh" "$EXPERIMENT" "$@"

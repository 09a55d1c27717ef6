#!/usr/bin/env bash
# GRPO on a registered task: its default experiment (rlvr/tasks/<task>.py) unless --config
# names another. `uv run python -m rlvr.tasks list` shows the tasks.
# Usage: bash scripts/run_grpo.sh TASK [--config EXPERIMENT] [hydra overrides...]
set -euo pipefail
TASK="${1:?usage: run_grpo.sh TASK [--config EXPERIMENT] [hydra overrides...]}"
shift
if [[ "${1:-}" == "--config" ]]; then
    EXPERIMENT="${2:?--config needs a name}"
    shift 2
else
    EXPERIMENT="$(uv run --no-sync python -m rlvr.tasks experiment "$TASK")"
fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch_grpo.sh" "$EXPERIMENT" "$@"

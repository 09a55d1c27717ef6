#!/usr/bin/env bash
# GRPO on a registered task: its default experiment (rlvr/tasks/<task>.py) unless --config
# names another. `uv run python -m rlvr.tasks list` shows the tasks.
# Usage: bash scripts/run_grpo.sh TASK [--config EXPERIMENT] [hydra overrides...]
set -euo pipefail
fail() { echo "run_grpo.sh: $1" >&2; exit 2; }
[[ -n "${1:-}" && "$1" != -* ]] ||
    fail "no task given; usage: run_grpo.sh TASK [--config EXPERIMENT] [overrides...] (tasks: uv run python -m rlvr.tasks list)"
TASK="$1"
shift
if [[ "${1:-}" == "--config" ]]; then
    [[ -n "${2:-}" && "$2" != -* ]] || fail "--config needs an experiment name (configs/*.yaml)"
    EXPERIMENT="$2"
    shift 2
else
    EXPERIMENT="$(uv run --no-sync python -m rlvr.tasks experiment "$TASK")"
fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/launch_grpo.sh" "$EXPERIMENT" "$@"

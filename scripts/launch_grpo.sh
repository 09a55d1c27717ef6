#!/usr/bin/env bash
# Run one experiment from configs/ with verl's unmodified trainer.
# Usage: bash scripts/launch_grpo.sh EXPERIMENT [hydra overrides...]
#   e.g. bash scripts/launch_grpo.sh countdown_qwen3_4b trainer.total_training_steps=50
# Pre-flight checks run first; the log is teed to artifacts/logs/ (or $RLVR_LOG_DIR); wandb is
# online only when a key is configured. The Ray instance verl starts lives and ends with this
# process (verl's ray.init starts a local one unless RAY_ADDRESS names a cluster).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXPERIMENT="${1:?usage: launch_grpo.sh EXPERIMENT [hydra overrides...]}"
shift
cd "$ROOT"
PY=(uv run --no-sync python)

"${PY[@]}" -m rlvr.preflight "$EXPERIMENT" "$@"

if [[ -n "${WANDB_API_KEY:-}" ]] || grep -qs "api.wandb.ai" "$HOME/.netrc"; then
    echo "wandb: online (a key is configured)"
else
    export WANDB_MODE=offline
    echo "wandb: offline mode (no key configured); sync later with: wandb sync artifacts/logs/wandb/offline-run-*"
fi
LOG_DIR="${RLVR_LOG_DIR:-$ROOT/artifacts/logs}"
export WANDB_DIR="$LOG_DIR"
mkdir -p "$LOG_DIR"
LOG="$LOG_DIR/${EXPERIMENT}_$(date +%Y%m%d_%H%M%S).log"
echo "log: $LOG"

"${PY[@]}" -m verl.trainer.main_ppo \
    --config-path="$ROOT/configs" --config-name="$EXPERIMENT" \
    paths.root="$ROOT" "$@" 2>&1 | tee "$LOG"

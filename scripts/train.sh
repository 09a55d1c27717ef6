#!/usr/bin/env bash
# Run one GRPO experiment from configs/ with verl 0.6.1's trainer through the recipes' entry
# point (rlvr/train/main.py; every change it makes to verl: docs/TRAINING.md, "What runs").
# Usage: bash scripts/train.sh EXPERIMENT [hydra overrides...]
#        bash scripts/train.sh EXPERIMENT --print_config [hydra overrides...]   print, run nothing
#   e.g. bash scripts/train.sh countdown_qwen3_4b trainer.total_training_steps=50
# Pre-flight checks run first (python -m rlvr.preflight.checks; docs/TRAINING.md, "Errors").
# The log is teed to artifacts/logs/ (or $RLVR_LOG_DIR), where wandb also keeps its run files.
# Environment it reads:
#   RAY_ADDRESS=auto      join the cluster of scripts/ray_cluster.sh (unset: a local Ray in its
#                         own temp dir, /tmp/rlvr-ray-*, that lives and ends with this process)
#   RLVR_LOG_DIR=DIR      where logs and wandb files go (default artifacts/logs)
#   RLVR_STRICT_MEMORY=1  refuse a run the GPU memory plan says will not fit (default: warn; the
#                         plan is an estimate)
#   WANDB_API_KEY         wandb online (also a key in ~/.netrc); without one, offline
# Stopping the launcher (Ctrl-C, SIGTERM, SIGHUP) stops every process of the run. After
# training, LoRA checkpoints get a merged, loadable actor/huggingface.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    echo "Experiments (configs/*.yaml):"
    local file
    for file in "$ROOT"/configs/*.yaml; do
        [[ "$(basename "$file")" == grpo.yaml ]] || echo "  $(basename "$file" .yaml)"
    done
}
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then usage; exit 0; fi
if [[ $# -lt 1 || -z "${1:-}" || "$1" == -* ]]; then
    echo "train.sh: no experiment given; usage: train.sh EXPERIMENT [hydra overrides...] (--help lists the experiments)" >&2
    exit 2
fi
EXPERIMENT="$1"
shift
PRINT_CONFIG=0
OVERRIDES=()
for arg in "$@"; do
    case "$arg" in
        --print_config) PRINT_CONFIG=1 ;;
        -h|--help) usage; exit 0 ;;
        *) OVERRIDES+=("$arg") ;;
    esac
done
set -- ${OVERRIDES[@]+"${OVERRIDES[@]}"}
# uv (installed when missing) and the locked environment, once the experiment is given.
source "$ROOT/scripts/lib/ensure_uv.sh"
cd "$ROOT"
if [[ "$PRINT_CONFIG" == 1 ]]; then
    # The whole composed config, as the trainer will get it; nothing runs.
    exec uv run --no-sync python -m rlvr.config.compose "$EXPERIMENT" "$@"
fi
# The project's interpreter, run directly: a driver started by `uv run` makes Ray 2.52 record
# this node's uv command as every worker's executable, which other nodes may not have.
PYTHON="$(uv run --no-sync python -c 'import sys; print(sys.executable)')"
export RAY_ENABLE_UV_RUN_RUNTIME_ENV=0

# Exit 2 with one line per problem (unknown experiment or key, data, model, numbers verl rejects,
# a running Ray cluster verl would join silently: docs/TRAINING.md, "Errors").
"$PYTHON" -m rlvr.preflight.checks "$EXPERIMENT" "$@"

if [[ -n "${WANDB_API_KEY:-}" ]] || grep -qs "api.wandb.ai" "$HOME/.netrc"; then
    echo "wandb: online (a key is configured)"
else
    export WANDB_MODE=offline
    echo "wandb: offline mode (no key configured); sync later with: wandb sync artifacts/logs/wandb/offline-run-*"
fi
LOG_DIR="${RLVR_LOG_DIR:-$ROOT/artifacts/logs}"
mkdir -p "$LOG_DIR"
LOG_DIR="$(cd "$LOG_DIR" && pwd)"
STAMP="${EXPERIMENT}_$(date +%Y%m%d_%H%M%S)"
export WANDB_DIR="$LOG_DIR"
LOG="$LOG_DIR/$STAMP.log"
echo "log: $LOG"

# verl's driver under a supervisor (rlvr/train/launch.py), which this process becomes: SIGINT,
# SIGTERM or SIGHUP stop the whole run (driver, Ray daemons, agents, workers) in one line and
# exit 128 + the signal; then the LoRA merge (LoRA checkpoints hold adapters only: each gets a
# merged, loadable actor/huggingface, also after a failed run).
exec "$PYTHON" -m rlvr.train.launch "$EXPERIMENT" "$LOG" "$@"

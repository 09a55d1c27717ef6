#!/usr/bin/env bash
# Start, inspect or stop this node's part of a multi-node Ray cluster for the GRPO recipes.
# Usage: bash scripts/ray_cluster.sh head [--port P] [RAY START OPTIONS...]   start the head
#        bash scripts/ray_cluster.sh worker HEAD_IP:PORT [RAY START OPTIONS...] join from a node
#        bash scripts/ray_cluster.sh status                nodes and GPUs the cluster sees
#        bash scripts/ray_cluster.sh stop                  ray stop: every Ray process of this
#                                                          user on this node
# The head runs Ray's dashboard and job server (127.0.0.1:8265), which sweeps submit to. GPUs
# are counted with torch unless --num-gpus is given. Every node needs this repository at the
# same path with `uv sync` done (rewards load by absolute path), and the data and checkpoint
# folders on a filesystem all nodes share. Then, on the head:
#   RAY_ADDRESS=auto bash scripts/run_grpo_countdown.sh --config countdown_qwen3_4b_2nodes
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() { sed -n '2,13p' "$0"; }
PYTHON="$(uv run --no-sync --project "$ROOT" python -c 'import sys; print(sys.executable)')"
RAY=("$(dirname "$PYTHON")/ray")

gpu_args() {  # --num-gpus from torch unless the caller passed one
    local arg
    for arg in "$@"; do [[ "$arg" == --num-gpus* ]] && return 0; done
    echo "--num-gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')"
}

case "${1:-}" in
    head)
        shift
        PORT=6379
        if [[ "${1:-}" == "--port" ]]; then PORT="${2:?--port needs a number}"; shift 2; fi
        [[ "$PORT" =~ ^[0-9]+$ ]] || { echo "ray_cluster.sh: --port must be a number" >&2; exit 2; }
        "${RAY[@]}" start --head --port="$PORT" --include-dashboard=true --disable-usage-stats \
            $(gpu_args "$@") "$@"
        echo "head started; on each worker node run:"
        echo "  bash scripts/ray_cluster.sh worker $(hostname -I | awk '{print $1}'):$PORT"
        ;;
    worker)
        ADDRESS="${2:?usage: ray_cluster.sh worker HEAD_IP:PORT [ray start options]}"
        shift 2
        "${RAY[@]}" start --address="$ADDRESS" --disable-usage-stats $(gpu_args "$@") "$@"
        ;;
    status) "${RAY[@]}" status ;;
    stop) "${RAY[@]}" stop ;;
    -h|--help) usage ;;
    *) usage >&2; exit 2 ;;
esac

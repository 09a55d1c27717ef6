#!/usr/bin/env bash
# Start, inspect or stop this node's part of a multi-node Ray cluster for the GRPO recipes.
# Usage: bash scripts/ray_cluster.sh head [PORT]          start the head (default port 6379)
#        bash scripts/ray_cluster.sh worker HEAD_IP:PORT   join a head from another node
#        bash scripts/ray_cluster.sh status                nodes and GPUs the cluster sees
#        bash scripts/ray_cluster.sh stop                  stop the Ray processes this node's
#                                                          `ray start` launched (ray stop)
# Then, on the head: RAY_ADDRESS=auto bash scripts/run_grpo_countdown.sh --config countdown_qwen3_4b_2nodes
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RAY=(uv run --no-sync --project "$ROOT" ray)
GPUS=$(uv run --no-sync --project "$ROOT" python -c "import torch; print(torch.cuda.device_count())")

case "${1:-}" in
    head)
        PORT="${2:-6379}"
        "${RAY[@]}" start --head --port="$PORT" --num-gpus="$GPUS" --include-dashboard=false
        echo "head started with $GPUS GPU(s); on each worker node run:"
        echo "  bash scripts/ray_cluster.sh worker $(hostname -I | awk '{print $1}'):$PORT"
        ;;
    worker)
        ADDRESS="${2:?usage: ray_cluster.sh worker HEAD_IP:PORT}"
        "${RAY[@]}" start --address="$ADDRESS" --num-gpus="$GPUS"
        ;;
    status)
        "${RAY[@]}" status
        ;;
    stop)
        "${RAY[@]}" stop
        ;;
    *)
        sed -n '2,8p' "$0"
        exit 2
        ;;
esac

#!/usr/bin/env bash
# Start, inspect or stop this node's part of a multi-node Ray cluster for the GRPO recipes.
# Usage: bash scripts/ray_cluster.sh head [--port P] [RAY START OPTIONS...]   start the head
#        bash scripts/ray_cluster.sh worker HEAD_IP:PORT [RAY START OPTIONS...] join from a node
#        bash scripts/ray_cluster.sh status                nodes and GPUs the cluster sees
#        bash scripts/ray_cluster.sh stop                  ray stop: every Ray process of this
#                                                          user on this node
# The head runs Ray's dashboard and job server (127.0.0.1:8265), which sweeps submit to. GPUs
# are counted with torch unless --num-gpus is given. Every node needs this repository at the
# same path (rewards load by absolute path; each run syncs the locked environment first), and
# the data and checkpoint folders on a filesystem all nodes share. Then, on the head:
#   RAY_ADDRESS=auto bash scripts/train.sh countdown_qwen3_4b_2nodes
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() { sed -n '2,12p' "$0"; }

ray_env() {  # after the argument checks: uv (installed when missing), the locked env, its ray
    source "$ROOT/scripts/lib/ensure_uv.sh"
    PYTHON="$(uv run --no-sync --project "$ROOT" python -c 'import sys; print(sys.executable)')"
    RAY=("$(dirname "$PYTHON")/ray")
}

gpu_args() {  # --num-gpus from torch unless the caller passed one
    local arg
    for arg in "$@"; do [[ "$arg" == --num-gpus* ]] && return 0; done
    echo "--num-gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')"
}

fail() { echo "ray_cluster.sh: $1" >&2; exit 2; }
port_ok() { [[ "$1" =~ ^[0-9]+$ ]] && ((10#$1 >= 1 && 10#$1 <= 65535)); }

case "${1:-}" in
    head)
        shift
        PORT=6379
        if [[ "${1:-}" == "--port" ]]; then PORT="${2:-}"; shift $(($# < 2 ? $# : 2)); fi
        port_ok "$PORT" || fail "--port must be a number from 1 to 65535, got '${PORT}'"
        ray_env
        "${RAY[@]}" start --head --port="$PORT" --include-dashboard=true --disable-usage-stats \
            $(gpu_args "$@") "$@"
        echo "head started; on each worker node run:"
        echo "  bash scripts/ray_cluster.sh worker $(hostname -I | awk '{print $1}'):$PORT"
        ;;
    worker)
        ADDRESS="${2:-}"
        [[ "$ADDRESS" =~ ^[A-Za-z0-9.-]+:([0-9]+)$ ]] && port_ok "${BASH_REMATCH[1]}" ||
            fail "worker needs the head's HOST:PORT (e.g. 10.0.0.1:6379), got '${ADDRESS}'"
        shift 2
        ray_env
        "${RAY[@]}" start --address="$ADDRESS" --disable-usage-stats $(gpu_args "$@") "$@"
        ;;
    status|stop)
        (($# == 1)) || fail "$1 takes no arguments, got: ${*:2}"
        ray_env
        "${RAY[@]}" "$1"
        ;;
    -h|--help) usage ;;
    *) fail "unknown command '${1:-}'; use head, worker, status or stop (--help for usage)" ;;
esac

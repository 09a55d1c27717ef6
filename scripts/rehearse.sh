#!/usr/bin/env bash
# CPU rehearsal of a GPU experiment at its real world size (8 ranks per node, 2 nodes for the
# 2-node one), through the real launcher, verl and Ray, with fake Ray GPUs and gloo.
# Usage: bash scripts/rehearse.sh EXPERIMENT [--objective NAME] [--out DIR] [--gpus_per_node N]
#          [--timeout_s S]
#   e.g. bash scripts/rehearse.sh countdown_qwen3_4b_lora --objective dapo
# The objective preset (configs/objective/, default grpo) is passed as objective=NAME; the
# default out folder is artifacts/rehearsal/EXPERIMENT-OBJECTIVE.
# Checks the gradient scale (verl's update vs plain torch), for 2 nodes step 1 against one node,
# each rank's device assignment, checkpoint shards, a strictly loadable actor/huggingface,
# per-step metrics, the wandb run, resume, and that no Ray process is left.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
exec "$(uv run --no-sync python -c 'import sys; print(sys.executable)')" -m rlvr.train.rehearsal "$@"

#!/usr/bin/env bash
# CPU rehearsal of a GPU experiment at its real world size (8 ranks per node, 2 nodes for the
# 2-node one), through the real launcher, verl and Ray, with fake Ray GPUs and gloo.
# Usage: bash scripts/rehearse.sh EXPERIMENT [--objective NAME] [--out DIR] [--gpus_per_node N]
#          [--timeout_s S] [--gpu [--dry_run]]
#   e.g. bash scripts/rehearse.sh countdown_qwen3_4b_lora --objective dapo
# The objective preset (configs/objective/, default grpo) is passed as objective=NAME; the
# default out folder is artifacts/rehearsal/EXPERIMENT-OBJECTIVE.
# Checks the gradient scale (verl's update vs plain torch), for 2 nodes step 1 against one node,
# each rank's device assignment, checkpoint shards, a strictly loadable actor/huggingface,
# per-step metrics, the wandb run, resume, and that no Ray process is left.
# On a GPU node: bash scripts/rehearse.sh --gpu EXPERIMENT [--dry_run] runs the same checks on the
# real stack (vLLM, NCCL) with Qwen2.5-0.5B-Instruct at the experiment's topology, plus the peak
# GPU memory verl logs against the planner's; --dry_run lists them, with tolerances, anywhere.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# uv (installed when missing) and the locked environment: the help and every check are Python.
source "$ROOT/scripts/lib/ensure_uv.sh"
cd "$ROOT"
exec "$(uv run --no-sync python -c 'import sys; print(sys.executable)')" -m rlvr.rehearsal.cpu "$@"

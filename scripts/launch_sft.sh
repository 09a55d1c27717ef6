#!/usr/bin/env bash
# SFT warm start with verl's own SFT trainer: one experiment from configs/sft/, under torchrun.
# Usage: bash scripts/launch_sft.sh EXPERIMENT [hydra overrides...]
#   e.g. bash scripts/launch_sft.sh countdown_smollm2_cpu trainer.total_epochs=2
# One process per GPU of this node (trainer.n_gpus_per_node; one on a machine without GPUs, with
# the CPU fixes of rlvr/cpu/sft.py). The model GRPO starts from is written to
# <trainer.default_local_dir>/global_step_N/huggingface; the last line printed is its path.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    echo "Experiments (configs/sft/*.yaml):"
    for file in "$ROOT"/configs/sft/*.yaml; do  # sft.yaml: the base the experiments extend
        [[ "$(basename "$file")" == sft.yaml ]] || echo "  $(basename "$file" .yaml)"
    done
    exit 0
fi
if [[ $# -lt 1 || -z "${1:-}" || "$1" == -* ]]; then
    echo "launch_sft.sh: no experiment given; usage: launch_sft.sh EXPERIMENT [hydra overrides...] (experiments: configs/sft/*.yaml)" >&2
    exit 2
fi
EXPERIMENT="$1"
shift
# uv (installed when missing) and the locked environment, once the experiment is given.
source "$ROOT/scripts/lib/ensure_uv.sh"
cd "$ROOT"
PYTHON="$(uv run --no-sync python -c 'import sys; print(sys.executable)')"
# Composes the experiment, runs verl's own batch checks, checks data and model exist; exit 2 with
# one line otherwise. Prints the process count, the device and where checkpoints go.
SETTINGS="$("$PYTHON" -m rlvr.train.sft_config "$EXPERIMENT" "$@")"
read -r NPROC DEVICE OUTPUT_DIR <<< "$SETTINGS"
echo "SFT: $EXPERIMENT, $NPROC process(es) on $DEVICE, checkpoints in $OUTPUT_DIR"
[[ -n "${WANDB_API_KEY:-}" ]] || export WANDB_MODE=offline
if [[ "$DEVICE" == cpu ]]; then
    # As the GRPO CPU workers (hardware/cpu.yaml): freed memory stays in the heap for reuse,
    # instead of every step page-faulting its activations in again (a third of the time).
    export GLIBC_TUNABLES="${GLIBC_TUNABLES:-glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736}"
fi
# torchrun as a stage (scripts/stages.sh): Ctrl-C, SIGTERM or SIGHUP stop it and its workers.
source scripts/stages.sh
stop_on_signals launch_sft.sh
stage "$PYTHON" -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node="$NPROC" \
    -m rlvr.train.sft --config-path="$ROOT/configs/sft" --config-name="$EXPERIMENT" \
    paths.root="$ROOT" "$@"
"$PYTHON" -m rlvr.train.sft_config "$EXPERIMENT" "$@" --model

#!/usr/bin/env bash
# Install the `gpu` extra (vllm 0.11.0, flash-attn 2.8.1) on a GPU node.
# Usage: bash scripts/install_gpu.sh [--cuda-arch N] [--no-flash-attn] [-- EXTRA_UV_SYNC_ARGS...]
#   flash-attn 2.8.1 published no wheel for torch 2.8 (its v2.8.1 release workflow builds for
#   torch 2.4-2.7; 2.8 arrives in v2.8.3), so it is compiled here, for this node's GPU only:
#   FLASH_ATTN_CUDA_ARCHS from the GPU's compute capability (8.x -> 80 for A100/A10/L4,
#   9.0 -> 90 for H100/H200; --cuda-arch N to choose, e.g. where torch sees no GPU), MAX_JOBS
#   from free memory as flash-attn's setup.py bounds it (~9 GB a job; an exported MAX_JOBS wins).
#   Needs nvcc with torch's CUDA major (12), as CUDA_HOME or on PATH.
#   --no-flash-attn: vllm only (it brings its own attention kernels); launch every run with
#   `+attention=sdpa` (configs/attention/sdpa.yaml: SDPA attention, no remove-padding).
#   Then verifies `import flash_attn_2_cuda` (the compiled extension) and `import vllm`; on
#   failure names the step, says what to do, and removes a broken flash-attn build from the venv
#   and the uv cache so that no later sync reuses it. Exit 0 ok, 1 a step failed, 2 bad arguments.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARCH=""
NO_FLASH_ATTN=0
UV_ARGS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --cuda-arch)
            [[ $# -ge 2 && "$2" =~ ^(80|90|100|120)$ ]] || {
                echo "--cuda-arch needs one of 80 90 100 120 (the archs flash-attn 2.8.1 builds)" >&2
                exit 2
            }
            ARCH="$2"; shift 2 ;;
        --no-flash-attn) NO_FLASH_ATTN=1; shift ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        --) shift; UV_ARGS=("$@"); break ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
cd "$ROOT"

fail() {  # fail STEP LINE...: say which step failed and what to do, exit 1
    echo "install_gpu.sh: FAILED at step: $1" >&2
    shift
    printf '  %s\n' "$@" >&2
    exit 1
}
command -v uv > /dev/null || fail "find uv" "uv is not on PATH: https://docs.astral.sh/uv/"
[[ "$(uname -s)" == Linux ]] || fail "platform" "the gpu extra is Linux-only (sys_platform markers)"

VENV="${UV_PROJECT_ENVIRONMENT:-.venv}"
[[ "$VENV" == /* ]] || VENV="$ROOT/$VENV"
PY="$VENV/bin/python"
FA_VERSION="$(sed -n 's/.*"flash-attn==\([0-9][0-9.a-z]*\).*/\1/p' pyproject.toml | head -1)"
[[ -n "$FA_VERSION" ]] || fail "read pin" "no flash-attn==X pin found in pyproject.toml"

echo "== 1/4 base environment: uv sync --inexact ${UV_ARGS[*]}"
uv sync --inexact ${UV_ARGS[@]+"${UV_ARGS[@]}"} || fail "uv sync (base environment)" \
    "the base environment must install before flash-attn can build; fix the error above"

if [[ "$NO_FLASH_ATTN" == 1 ]]; then
    echo "== 2/4 vllm only (--no-flash-attn)"
    echo "== 3/4 uv sync --extra gpu --no-install-package flash-attn ${UV_ARGS[*]}"
    uv sync --extra gpu --no-install-package flash-attn ${UV_ARGS[@]+"${UV_ARGS[@]}"} \
        || fail "uv sync --extra gpu (without flash-attn)" "read the error above and rerun"
    echo "== 4/4 verify"
    "$PY" -c "import vllm; print('   vllm', vllm.__version__)" || fail "import vllm" \
        "vllm does not import (error above); rerun, or: uv sync --extra gpu --reinstall-package vllm"
    echo "vllm installed, no flash-attn: launch every run with +attention=sdpa, e.g."
    echo "  bash scripts/train.sh countdown_qwen3_4b +attention=sdpa"
    exit 0
fi

echo "== 2/4 torch, GPU architecture, nvcc"
# What flash-attn's setup.py sees: torch's CUDA build and CUDA_HOME as torch finds it
# (CUDA_HOME/CUDA_PATH, else nvcc on PATH, else /usr/local/cuda); and this node's GPU.
INFO="$("$PY" -c '
import torch
from torch.utils.cpp_extension import CUDA_HOME
print("TORCH=" + torch.__version__)
print("TORCH_CUDA=" + (torch.version.cuda or ""))
print("CUDA_HOME_SEEN=" + (CUDA_HOME or ""))
cap = torch.cuda.get_device_capability(0) if torch.cuda.is_available() else None
print("CAPABILITY=" + ("%d.%d" % cap if cap else ""))
')" || fail "inspect torch" "$PY could not import torch; run \`uv sync\` and retry"
TORCH="" TORCH_CUDA="" CUDA_HOME_SEEN="" CAPABILITY=""
while IFS='=' read -r key value; do
    case "$key" in
        TORCH) TORCH="$value" ;; TORCH_CUDA) TORCH_CUDA="$value" ;;
        CUDA_HOME_SEEN) CUDA_HOME_SEEN="$value" ;; CAPABILITY) CAPABILITY="$value" ;;
    esac
done <<< "$INFO"
[[ -n "$TORCH_CUDA" ]] || fail "inspect torch" "torch $TORCH is not a CUDA build; flash-attn needs one"

if [[ -z "$ARCH" ]]; then
    # flash-attn 2.8.1 compiles sm_80, sm_90, sm_100 and sm_120 (setup.py, cuda_archs()); an 8.x
    # GPU (A100 8.0, A10/3090 8.6, L4/4090 8.9) runs the sm_80 code.
    case "${CAPABILITY%%.*}" in
        8) ARCH=80 ;; 9) ARCH=90 ;; 10) ARCH=100 ;; 12) ARCH=120 ;;
        "") fail "find the GPU architecture" "torch sees no GPU on this node (driver?)." \
            "Pass the target yourself: --cuda-arch 80 (A100) or --cuda-arch 90 (H100)." ;;
        *) fail "find the GPU architecture" "compute capability $CAPABILITY: flash-attn $FA_VERSION" \
            "builds only for 8.x, 9.0, 10.x and 12.x GPUs. Use --no-flash-attn (SDPA) instead." ;;
    esac
fi

NVCC_RELEASE=""
if [[ -n "$CUDA_HOME_SEEN" && -x "$CUDA_HOME_SEEN/bin/nvcc" ]]; then
    NVCC_RELEASE="$("$CUDA_HOME_SEEN/bin/nvcc" --version \
        | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p' | head -1)" || NVCC_RELEASE=""
fi
TOOLKIT_HINT=(
    "Install a CUDA ${TORCH_CUDA%%.*}.x toolkit with nvcc (torch is built with CUDA $TORCH_CUDA):"
    "e.g. 'apt-get install cuda-toolkit-${TORCH_CUDA//./-}' from NVIDIA's repository or"
    "'conda install -c nvidia cuda-nvcc=$TORCH_CUDA', then put its bin/ on PATH or set CUDA_HOME."
    "Or rerun with --no-flash-attn: vllm only, and runs launched with +attention=sdpa."
)
[[ -n "$NVCC_RELEASE" ]] || fail "find nvcc" "no nvcc (torch sees CUDA_HOME=${CUDA_HOME_SEEN:-none})." \
    "${TOOLKIT_HINT[@]}"
[[ "${NVCC_RELEASE%%.*}" == "${TORCH_CUDA%%.*}" ]] || fail "find nvcc" \
    "nvcc $NVCC_RELEASE at $CUDA_HOME_SEEN/bin/nvcc cannot build for torch's CUDA $TORCH_CUDA." \
    "${TOOLKIT_HINT[@]}"

if [[ -z "${MAX_JOBS:-}" ]]; then
    # flash-attn's own bound (setup.py, NinjaBuildExtension): half the cores, ~9 GB per job.
    MAX_JOBS="$("$PY" -c '
import os, psutil
print(max(1, min(os.cpu_count() // 2, int(psutil.virtual_memory().available / 2**30 / 9))))
')" || MAX_JOBS=1
fi
export FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTENTION_SKIP_CUDA_BUILD=FALSE
export FLASH_ATTN_CUDA_ARCHS="$ARCH" MAX_JOBS
MODE="compiling flash-attn $FA_VERSION for sm_$ARCH with nvcc $NVCC_RELEASE, MAX_JOBS=$MAX_JOBS"
echo "   torch $TORCH (CUDA $TORCH_CUDA), GPU capability ${CAPABILITY:-none}; $MODE"

echo "== 3/4 uv sync --extra gpu ${UV_ARGS[*]}"
FLASH_CHECK="
import torch, flash_attn_2_cuda, flash_attn
assert flash_attn.__version__ == '$FA_VERSION', 'flash-attn ' + flash_attn.__version__
print('   flash-attn', flash_attn.__version__, flash_attn_2_cuda.__file__)
"
REINSTALL=()
if "$PY" -c "$FLASH_CHECK" > /dev/null 2>&1; then
    echo "   flash-attn $FA_VERSION with its CUDA extension already imports: keeping it"
else
    # uv keys its cache of built wheels by the sdist and [tool.uv] build settings, not by the
    # environment: drop any earlier flash-attn build so this one really runs with these variables.
    uv cache clean flash-attn || fail "uv cache clean flash-attn" "is another uv running? rerun"
    REINSTALL=(--reinstall-package flash-attn)
fi
uv sync --extra gpu ${REINSTALL[@]+"${REINSTALL[@]}"} ${UV_ARGS[@]+"${UV_ARGS[@]}"} \
    || fail "uv sync --extra gpu" "mode: $MODE" \
        "Read the error above (it includes flash-attn's build output)." \
        "Out of memory while compiling: rerun with a smaller MAX_JOBS (e.g. MAX_JOBS=2)."

echo "== 4/4 verify"
drop_flash_attn() {
    uv pip uninstall --python "$PY" flash-attn || true
    uv cache clean flash-attn || true
}
if ! "$PY" -c "$FLASH_CHECK"; then
    drop_flash_attn
    fail "import flash_attn_2_cuda (flash-attn's compiled CUDA extension)" "mode: $MODE" \
        "flash-attn installed without a working CUDA extension (error above)." \
        "The broken build was uninstalled and removed from the uv cache; fix the cause and rerun."
fi
"$PY" -c "import vllm; print('   vllm', vllm.__version__)" || fail "import vllm" \
    "vllm does not import (error above); rerun, or: uv sync --extra gpu --reinstall-package vllm"
"$PY" -c "import torch; assert torch.cuda.is_available()" 2> /dev/null \
    || echo "   warning: torch sees no GPU on this node (driver?); the install itself is complete"
echo "GPU extra installed and verified ($MODE)."

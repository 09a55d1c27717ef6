#!/usr/bin/env bash
# Install the `gpu` extra (vllm, flash-attn) on a GPU node, with or without the CUDA toolkit.
# Usage: bash scripts/install_gpu.sh [--prebuilt-only] [-- EXTRA_UV_SYNC_ARGS...]
#   1. `uv sync --inexact` (torch and flash-attn's build imports), then `uv sync --extra gpu`
#      with flash-attn's build variables chosen for this node: with a usable nvcc (same CUDA
#      major as torch) its setup.py may download the prebuilt wheel or compile; without one it
#      may only download the prebuilt wheel, and the script stops first, naming the URL, if
#      that wheel cannot be fetched. --prebuilt-only never compiles, even with nvcc.
#   2. Verifies `import flash_attn_2_cuda` (the compiled extension) and `import vllm`; on
#      failure it names the step, says what to do, and removes the broken flash-attn build
#      from the venv and the uv cache so that no later sync reuses it.
#   Exit 0 ok, 1 a step failed, 2 bad arguments. MAX_JOBS bounds a compile's memory.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREBUILT_ONLY=0
UV_ARGS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --prebuilt-only) PREBUILT_ONLY=1; shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
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

echo "== 2/4 torch, CUDA toolkit and the prebuilt flash-attn $FA_VERSION wheel"
# What flash-attn's setup.py sees: torch's CUDA build, its C++ ABI, and CUDA_HOME as torch
# finds it (CUDA_HOME/CUDA_PATH, else nvcc on PATH, else /usr/local/cuda).
INFO="$("$PY" -c '
import platform, sys
import torch
from torch.utils.cpp_extension import CUDA_HOME
print("TORCH=" + torch.__version__)
print("TORCH_CUDA=" + (torch.version.cuda or ""))
print("CXX11ABI=" + str(torch._C._GLIBCXX_USE_CXX11_ABI).upper())
print("PYTAG=cp%d%d" % sys.version_info[:2])
print("MACHINE=" + platform.uname().machine)
print("CUDA_HOME_SEEN=" + (CUDA_HOME or ""))
')" || fail "inspect torch" "$PY could not import torch; run \`uv sync\` and retry"
TORCH="" TORCH_CUDA="" CXX11ABI="" PYTAG="" MACHINE="" CUDA_HOME_SEEN=""
while IFS='=' read -r key value; do
    case "$key" in
        TORCH) TORCH="$value" ;; TORCH_CUDA) TORCH_CUDA="$value" ;; CXX11ABI) CXX11ABI="$value" ;;
        PYTAG) PYTAG="$value" ;; MACHINE) MACHINE="$value" ;; CUDA_HOME_SEEN) CUDA_HOME_SEEN="$value" ;;
    esac
done <<< "$INFO"
[[ -n "$TORCH_CUDA" ]] || fail "inspect torch" "torch $TORCH is not a CUDA build; flash-attn needs one"

# The URL flash-attn's setup.py guesses (get_wheel_url): CUDA 11 -> cu11, anything else -> cu12.
TORCH_MM="$(echo "${TORCH%%+*}" | cut -d. -f1,2)"
CU=$([[ "${TORCH_CUDA%%.*}" == 11 ]] && echo 11 || echo 12)
WHEEL="flash_attn-${FA_VERSION}+cu${CU}torch${TORCH_MM}cxx11abi${CXX11ABI}-${PYTAG}-${PYTAG}-linux_${MACHINE}.whl"
URL="https://github.com/Dao-AILab/flash-attention/releases/download/v${FA_VERSION}/${WHEEL}"

NVCC_NOTE="no nvcc (torch sees CUDA_HOME=${CUDA_HOME_SEEN:-none})"
CAN_COMPILE=0
if [[ -n "$CUDA_HOME_SEEN" && -x "$CUDA_HOME_SEEN/bin/nvcc" ]]; then
    NVCC_RELEASE="$("$CUDA_HOME_SEEN/bin/nvcc" --version | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p' | head -1)" \
        || NVCC_RELEASE=""
    NVCC_NOTE="nvcc $NVCC_RELEASE at $CUDA_HOME_SEEN/bin/nvcc"
    if [[ "${NVCC_RELEASE%%.*}" == "${TORCH_CUDA%%.*}" ]]; then
        CAN_COMPILE=1
    else
        NVCC_NOTE="$NVCC_NOTE, unusable: torch is built with CUDA $TORCH_CUDA"
    fi
fi
echo "   torch $TORCH (CUDA $TORCH_CUDA, cxx11abi $CXX11ABI, $PYTAG, $MACHINE); $NVCC_NOTE"
echo "   prebuilt wheel: $URL"

# Probe the URL with the same library setup.py downloads it with (urllib, honours HTTPS_PROXY).
REACHABLE=1
"$PY" -c '
import sys, urllib.request
request = urllib.request.Request(sys.argv[1], headers={"Range": "bytes=0-0"})
try:
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read(1)
except Exception as error:
    sys.exit(f"   cannot fetch it from this node: {error}")
' "$URL" || REACHABLE=0

if [[ "$CAN_COMPILE" == 1 && "$PREBUILT_ONLY" == 0 ]]; then
    export FLASH_ATTENTION_SKIP_CUDA_BUILD=FALSE
    SYNC_HINT="A compile needs ~9 GB RAM per job: retry with MAX_JOBS=4 (or --prebuilt-only)."
    if [[ "$REACHABLE" == 1 ]]; then
        MODE="nvcc present: setup.py downloads the prebuilt wheel, compiles only if that fails"
        export FLASH_ATTENTION_FORCE_BUILD=FALSE
    else
        MODE="nvcc present, prebuilt wheel unreachable: compiling from source (long; MAX_JOBS)"
        export FLASH_ATTENTION_FORCE_BUILD=TRUE
    fi
else
    if [[ "$REACHABLE" == 0 && "$CAN_COMPILE" == 1 ]]; then
        fail "download the prebuilt flash-attn wheel" "$URL could not be fetched." \
            "Make github.com reachable (HTTPS_PROXY) or drop --prebuilt-only to compile with" \
            "$NVCC_NOTE. The gpu extra was not installed."
    elif [[ "$REACHABLE" == 0 ]]; then
        fail "download the prebuilt flash-attn wheel" "$URL could not be fetched." \
            "This node cannot compile flash-attn either ($NVCC_NOTE)." \
            "Make github.com reachable (HTTPS_PROXY), or install the CUDA ${TORCH_CUDA%%.*}.x toolkit" \
            "(nvcc on PATH or CUDA_HOME) so it can compile, and rerun. The gpu extra was not installed."
    fi
    MODE="prebuilt wheel only (FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE: no compile)"
    SYNC_HINT="The build downloads $URL again: check the connection or proxy and rerun."
    export FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE FLASH_ATTENTION_FORCE_BUILD=FALSE
fi
echo "   mode: $MODE"

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
        "Read the error above (it includes flash-attn's build output)." "$SYNC_HINT"

echo "== 4/4 verify"
drop_flash_attn() {
    uv pip uninstall --python "$PY" flash-attn || true
    uv cache clean flash-attn || true
}
if ! "$PY" -c "$FLASH_CHECK"; then
    drop_flash_attn
    fail "import flash_attn_2_cuda (flash-attn's compiled CUDA extension)" \
        "mode: $MODE" \
        "flash-attn installed without a working CUDA extension: its setup.py falls back to a" \
        "Python-only wheel when it cannot download $URL" \
        "with FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE, or the extension does not load (error above)." \
        "The broken build was uninstalled and removed from the uv cache; fix the cause and rerun."
fi
"$PY" -c "import vllm; print('   vllm', vllm.__version__)" || fail "import vllm" \
    "vllm does not import (error above); rerun, or: uv sync --extra gpu --reinstall-package vllm"
"$PY" -c "import torch; assert torch.cuda.is_available()" 2> /dev/null \
    || echo "   warning: torch sees no GPU on this node (driver?); the install itself is complete"
echo "GPU extra installed and verified ($MODE)."

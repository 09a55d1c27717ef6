# Sourced, not run (`source scripts/lib/ensure_uv.sh`): makes a machine with only Python 3.10-3.12
# ready for the repository's scripts. Installs uv when it is missing, then `uv sync --locked`.
# Silent when all is in place, so that callers' own output (one-line errors, --dry_run plans)
# stays theirs; prints uv's output and returns 1 when the sync fails.
# --inexact: install_gpu.sh adds vllm and flash-attn (the `gpu` extra) to the same environment;
# a plain sync would uninstall them before every run.

_ensure_uv_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# A parent script (quickstart.sh, test.sh) synced this checkout already: the launchers it runs
# skip the re-check, which takes about 3 s even when nothing changed.
if [[ "${RLVR_UV_SYNCED:-}" == "$_ensure_uv_root" ]] && command -v uv >/dev/null 2>&1; then
    unset _ensure_uv_root
    return 0
fi
if ! command -v uv >/dev/null 2>&1; then
    echo "ensure_uv: uv not found; installing it: python3 -m pip install --quiet \"uv>=0.8\"" >&2
    python3 -m pip install --quiet "uv>=0.8" || {
        echo "ensure_uv: could not install uv with pip; install it by hand: https://docs.astral.sh/uv/" >&2
        return 1
    }
    # pip's script folder may not be on PATH (pyenv shims, user installs): the launchers call uv.
    PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$HOME/.local/bin:$PATH"
    export PATH
    command -v uv >/dev/null 2>&1 || {
        echo "ensure_uv: pip installed uv but it is not on PATH; add pip's script folder to PATH" >&2
        return 1
    }
fi
if [[ ! -d "$_ensure_uv_root/.venv" ]]; then
    # The first sync downloads the locked stack (about 7 GB): say why nothing moves for minutes.
    echo "ensure_uv: uv sync --locked (first run: downloads about 7 GB)" >&2
fi
_ensure_uv_log="$(mktemp)"
if ! (cd "$_ensure_uv_root" && uv sync --locked --inexact) >"$_ensure_uv_log" 2>&1; then
    cat "$_ensure_uv_log" >&2
    rm -f "$_ensure_uv_log"
    echo "ensure_uv: uv sync --locked failed (output above)" >&2
    return 1
fi
rm -f "$_ensure_uv_log"
export RLVR_UV_SYNCED="$_ensure_uv_root"
unset _ensure_uv_root _ensure_uv_log

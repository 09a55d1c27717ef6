#!/usr/bin/env bash
# Everything CI runs (.ci/run calls exactly this): ruff check, ruff format --check, mypy, pytest.
# Usage: bash scripts/test.sh [pytest args...]
#   bash scripts/test.sh                  # everything: the fast tier, then the slow end-to-end runs
#   bash scripts/test.sh -m "not slow"    # the fast tier, for development
#   bash scripts/test.sh -m slow          # the end-to-end tier alone
# Installs uv when missing and syncs the locked environment first (scripts/lib/ensure_uv.sh).
# Exit: the first failing step's code; 0 when all pass.
set -euo pipefail
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
fi
source "$(dirname "${BASH_SOURCE[0]}")/lib/ensure_uv.sh"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export UV_NO_PROGRESS=1 WANDB_MODE=offline HF_HUB_OFFLINE=1
# The Tinker tests drive the tinker SDK, an extra beside the base install (pyproject.toml); their
# TuFT server builds an environment of its own (rlvr/tinker/tuft_env.py). Tests marked
# extra(...) skip where their extra is missing; here, having synced it, they must run.
uv sync --locked --inexact --extra tinker --quiet
export RLVR_REQUIRE_EXTRAS=tinker

uv --version
uv run ruff check .
uv run ruff format --check .
uv run mypy
# The 30 slowest tests close every log: where CI's time goes, for the speed budget.
if [[ $# -gt 0 ]]; then
    uv run pytest --durations=30 "$@"
else
    # Everything: the fast tier on every core, then the slow tier alone in one process (its
    # runs each need the whole machine; pyproject.toml's addopts run them one at a time anyway).
    uv run pytest --durations=30 -m "not slow"
    uv run pytest --durations=30 -m slow -n 0
fi

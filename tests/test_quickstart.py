"""The README's main job, run as a user runs it: `bash scripts/quickstart.sh --model tiny`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import run_bounded

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.no_cuda  # with GPUs the quickstart runs the 8-GPU recipe instead
def test_quickstart_tiny(tmp_path: Path) -> None:
    env = {**os.environ, "RLVR_LOG_DIR": str(tmp_path / "logs"), "WANDB_MODE": "offline"}
    output = run_bounded(
        [
            "bash",
            "scripts/quickstart.sh",
            "--model",
            "tiny",
            "--steps",
            "1",
            "--out",
            str(tmp_path / "qs"),
        ],
        env,
        900,
    )
    assert "Quickstart report (tiny, 1 GRPO step(s)" in output
    assert "| pass@1 |" in output
    checkpoint = tmp_path / "qs/checkpoints/quickstart_tiny/global_step_1/actor/huggingface"
    assert (checkpoint / "model.safetensors").is_file()
    after = json.loads((tmp_path / "qs/eval_after/summary.json").read_text())
    assert after["model"] == str(checkpoint) and after["prompts"] == 32


def test_quickstart_rejects_bad_flags() -> None:
    for args in (["--model", "gpt5"], ["--steps", "0"], ["--bogus"]):
        done = subprocess.run(
            ["bash", "scripts/quickstart.sh", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (args, done.stderr)

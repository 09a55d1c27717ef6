"""The Ray setup hook: imports neither torch nor verl, and its patches land when verl loads.

Each case runs in a fresh interpreter, as a Ray worker would run the hook.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, env: dict[str, str] | None = None) -> dict:
    import os

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_")}
    full_env |= env or {}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cpu_compat", ["0", "1"])
def test_hook_leaves_torch_and_verl_unimported(cpu_compat: str) -> None:
    """A GPU worker runs the hook before Ray sets CUDA_VISIBLE_DEVICES: importing torch (via
    verl.utils.device) there would pin every rank to GPU 0. a3b0be1's hook imported both."""
    result = _run(
        """
        import json, sys
        from rlvr.train import verl_hooks
        verl_hooks.install()
        print(json.dumps({m: m in sys.modules for m in ("torch", "verl")}))
        """,
        {"RLVR_CPU_COMPAT": cpu_compat},
    )
    assert result == {"torch": False, "verl": False}


def test_wandb_patch_lands_when_verl_is_imported() -> None:
    result = _run(
        """
        import json
        from rlvr.train import verl_hooks
        verl_hooks.install()
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        print(json.dumps({"patched": getattr(RayPPOTrainer.fit, "_rlvr_finishes_wandb", False)}))
        """
    )
    assert result == {"patched": True}


def test_cpu_fixes_land_when_verl_is_imported() -> None:
    result = _run(
        """
        import json
        from rlvr.train import verl_hooks
        verl_hooks.install()
        import verl
        import torch.distributed as dist
        from verl.workers.rollout import base
        print(json.dumps({
            "gloo": getattr(dist.init_process_group, "_rlvr_cpu", False),
            "hf_rollout": ("hf", "sync") in base._ROLLOUT_REGISTRY,
        }))
        """,
        {"RLVR_CPU_COMPAT": "1"},
    )
    assert result == {"gloo": True, "hf_rollout": True}


def test_without_the_cpu_overlay_nothing_cpu_specific_is_patched() -> None:
    result = _run(
        """
        import json
        from rlvr.train import verl_hooks
        verl_hooks.install()
        import verl
        import torch.distributed as dist
        print(json.dumps({"gloo": getattr(dist.init_process_group, "_rlvr_cpu", False)}))
        """
    )
    assert result == {"gloo": False}


def test_trace_records_devices_at_hook_and_at_torch_import(tmp_path: Path) -> None:
    """The rehearsal's evidence: CUDA_VISIBLE_DEVICES as seen when torch is first imported."""
    _run(
        """
        import json, os
        from rlvr.train import verl_hooks
        verl_hooks.install()
        os.environ["CUDA_VISIBLE_DEVICES"] = "3"   # what Ray does when the actor starts
        import torch
        print(json.dumps({}))
        """,
        {"RLVR_TRACE_DIR": str(tmp_path), "RANK": "5"},
    )
    (trace,) = tmp_path.glob("*.jsonl")
    hook, imported = (json.loads(line) for line in trace.read_text().splitlines())
    assert (hook["event"], hook["cuda_visible_devices"], hook["torch_loaded"]) == (
        "hook",
        None,
        False,
    )
    assert (imported["event"], imported["cuda_visible_devices"], imported["rank"]) == (
        "torch_imported",
        "3",
        "5",
    )

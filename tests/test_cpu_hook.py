"""rlvr/cpu/hook.py, the CPU path's Ray setup hook: imports neither torch nor verl, and its
fixes land when verl loads. Each case runs in a fresh interpreter, as a Ray worker runs the hook
(the import order is what is under test)."""

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
        from rlvr.cpu import hook
        hook.install()
        print(json.dumps({m: m in sys.modules for m in ("torch", "verl")}))
        """,
        {"RLVR_CPU_COMPAT": cpu_compat},
    )
    assert result == {"torch": False, "verl": False}


def test_only_the_cpu_overlay_makes_the_hook_patch_verl(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without RLVR_CPU_COMPAT (a GPU run, or a CPU run outside the overlays) the hook registers
    nothing for verl; with it, the CPU fixes once verl is imported (tests/test_cpu_compat.py's
    test_fixes_apply_and_work_without_cuda shows them landing through the hook)."""
    from rlvr.cpu import hook

    registered: list[str] = []
    monkeypatch.setattr(hook, "after_import", lambda name, callback: registered.append(name))
    for name in (hook.CPU_COMPAT_ENV, hook.TRACE_DIR_ENV, hook.HIDE_GPUS_ENV):
        monkeypatch.delenv(name, raising=False)
    hook.install()
    assert registered == []
    monkeypatch.setenv(hook.CPU_COMPAT_ENV, "1")
    hook.install()
    assert registered == ["verl"]


@pytest.mark.parametrize("hide", [True, False])
def test_rehearsal_hides_the_gpu_ray_assigned_once_traced(tmp_path: Path, hide: bool) -> None:
    """On a GPU node Ray's fake id would name a real GPU: with RLVR_HIDE_GPUS the rank records
    it, then torch sees none (torch reads CUDA_VISIBLE_DEVICES only when CUDA initialises)."""
    seen = _run(
        """
        import json, os
        from rlvr.cpu import hook
        hook.install()
        os.environ["CUDA_VISIBLE_DEVICES"] = "3"   # what Ray does when the actor starts
        import torch
        print(json.dumps({"env": os.environ["CUDA_VISIBLE_DEVICES"],
                          "count": torch.cuda.device_count()}))
        """,
        {"RLVR_TRACE_DIR": str(tmp_path), "RANK": "5"} | ({"RLVR_HIDE_GPUS": "1"} if hide else {}),
    )
    (trace,) = tmp_path.glob("*.jsonl")
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    # the trace, the rehearsal's evidence: no torch and no device at hook time, Ray's device
    # when torch is first imported
    hook, imported = events[:2]
    assert (hook["event"], hook["cuda_visible_devices"], hook["torch_loaded"]) == (
        "hook",
        None,
        False,
    )
    assert imported["rank"] == "5"
    assert [(e["event"], e["cuda_visible_devices"]) for e in events[1:]] == (
        [("torch_imported", "3"), ("gpus_hidden", "")] if hide else [("torch_imported", "3")]
    )
    assert seen["env"] == ("" if hide else "3")
    if hide:
        assert seen["count"] == 0


def test_rehearsal_launches_hide_the_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr.rehearsal.launch import _env
    from rlvr.rehearsal.plan import make_plan

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # a user's own choice on a GPU node
    env = _env(make_plan("countdown_qwen3_4b", tmp_path, 8))
    assert env["RLVR_HIDE_GPUS"] == "1" and "CUDA_VISIBLE_DEVICES" not in env


def test_only_the_cpu_path_has_a_setup_hook() -> None:
    """GPU experiments run with no Ray setup hook; the CPU overlay (hardware/cpu, and the
    rehearsal's +rehearsal=cpu on a GPU experiment) sets this one."""
    from omegaconf import OmegaConf

    from rlvr.config.compose import compose, experiments

    key = "ray_kwargs.ray_init.runtime_env.worker_process_setup_hook"
    hooks = {name: OmegaConf.select(compose(name), key) for name in experiments()}
    assert {name for name, hook in hooks.items() if hook} == {
        name for name in hooks if name.endswith("_cpu")
    }
    assert set(hooks.values()) == {None, "rlvr.cpu.hook.install"}
    rehearsed = compose("countdown_qwen3_4b", ["+rehearsal=cpu"])
    assert OmegaConf.select(rehearsed, key) == "rlvr.cpu.hook.install"

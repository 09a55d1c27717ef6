"""scripts/install_gpu.sh with stub `uv`, `nvcc` and venv python: which flash-attn build
variables it picks for the node's GPU, what it says without a usable nvcc, the vllm-only
fallback, and that a broken result fails loudly. What flash-attn 2.8.1 published is real data
(tests/data/flash_attn_2.8.1_wheels.txt, from its release workflow), not a stub."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install_gpu.sh"
FA_VERSION = re.search(r'"flash-attn==([0-9.]+)', (ROOT / "pyproject.toml").read_text())[1]
# What flash-attn 2.8.1 really published (from its release workflow at v2.8.1; see the file).
RELEASED = [
    line
    for line in (ROOT / "tests/data/flash_attn_2.8.1_wheels.txt").read_text().splitlines()
    if line and not line.startswith("#")
]

# The venv python: answers the script's torch/GPU query, its MAX_JOBS query and import checks from
# FAKE_* variables; flash-attn's state (absent, ok, hollow) lives in a file the uv stub writes.
FAKE_PYTHON = """
import json, os, sys
from pathlib import Path

code, args = sys.argv[2], sys.argv[3:]
state = Path(os.environ["FAKE_STATE"])
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"tool": "python", "code": code, "args": args}) + "\\n")
if "get_device_capability" in code:
    print("TORCH=2.8.0+cu128\\nTORCH_CUDA=12.8")
    print("CUDA_HOME_SEEN=" + os.environ.get("FAKE_CUDA_HOME", ""))
    print("CAPABILITY=" + os.environ.get("FAKE_CAPABILITY", "8.0"))
elif "virtual_memory" in code:
    print(os.environ.get("FAKE_JOBS", "3"))
elif "flash_attn_2_cuda" in code:
    if not state.exists() or state.read_text() != "ok":
        sys.exit("ModuleNotFoundError: No module named 'flash_attn_2_cuda'")
    print("   flash-attn ok")
elif "import vllm" in code and os.environ.get("FAKE_VLLM") == "fail":
    sys.exit("ImportError: vllm")
"""

FAKE_UV = """
import json, os, sys
from pathlib import Path

argv = sys.argv[1:]
state = Path(os.environ["FAKE_STATE"])
env = {k: v for k, v in os.environ.items() if k.startswith("FLASH_ATT") or k == "MAX_JOBS"}
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"tool": "uv", "argv": argv, "env": env}) + "\\n")
if argv[:1] == ["sync"] and "--extra" in argv:
    if os.environ.get("FAKE_UV_GPU") == "fail":
        sys.exit("error: Failed to build `flash-attn==2.8.1`")
    state.write_text(os.environ.get("FAKE_BUILD", "ok"))
elif argv[:2] == ["pip", "uninstall"] and state.exists():
    state.unlink()
"""


def _stub(path: Path, body: str, interpreter: str = sys.executable) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{interpreter}\n{body}")
    path.chmod(0o755)


def run(
    tmp_path: Path,
    *args: str,
    nvcc: str | None = "12.8",
    extra_env: dict[str, str] | None = None,
    **fake: str,
):
    """Run the script; returns (exit code, output, uv calls, python calls)."""
    _stub(tmp_path / "bin" / "uv", FAKE_UV)
    _stub(tmp_path / "venv" / "bin" / "python", FAKE_PYTHON)
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "UV_PROJECT_ENVIRONMENT": str(tmp_path / "venv"),
        "FAKE_LOG": str(tmp_path / "log.jsonl"),
        "FAKE_STATE": str(tmp_path / "flash_attn_state"),
        **{f"FAKE_{key.upper()}": value for key, value in fake.items()},
        **(extra_env or {}),
    }
    if nvcc is not None:
        body = f'echo "Cuda compilation tools, release {nvcc}, V{nvcc}.1"\n'
        _stub(tmp_path / "cuda" / "bin" / "nvcc", body, interpreter="/bin/sh")
        env["FAKE_CUDA_HOME"] = str(tmp_path / "cuda")
    proc = subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60
    )
    log = tmp_path / "log.jsonl"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    uv = [c for c in calls if c["tool"] == "uv"]
    python = [c for c in calls if c["tool"] == "python"]
    return proc.returncode, proc.stdout + proc.stderr, uv, python


def gpu_sync(uv_calls: list[dict]) -> dict:
    (call,) = [c for c in uv_calls if c["argv"][:3] == ["sync", "--extra", "gpu"]]
    return call


def test_syntax_help_and_bad_arguments(tmp_path: Path) -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    text = SCRIPT.read_text()
    assert "set -euo pipefail" in text
    help_ = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True)
    assert help_.returncode == 0
    assert "Usage: bash scripts/install_gpu.sh" in help_.stdout
    assert "flash_attn_2_cuda" in help_.stdout
    for bad in (["--bogus"], ["--prebuilt-only"], ["--cuda-arch", "86"], ["--cuda-arch"]):
        code, out, uv, _ = run(tmp_path, *bad)
        assert code == 2, out
        assert uv == []


def test_flash_attn_281_published_no_wheel_for_this_torch() -> None:
    """The old script's premise: a prebuilt 2.8.1 wheel for torch 2.8. The real release list
    (tests/data) has none, so nothing here may download or name one."""
    torch_pin = re.search(r'"torch==([0-9]+\.[0-9]+)', (ROOT / "pyproject.toml").read_text())[1]
    assert FA_VERSION == "2.8.1" and torch_pin == "2.8"
    assert len(RELEASED) == 38
    assert not [name for name in RELEASED if f"torch{torch_pin}" in name]
    assert "flash_attn-2.8.1+cu12torch2.7cxx11abiTRUE-cp311-cp311-linux_x86_64.whl" in RELEASED
    script = SCRIPT.read_text()
    assert "releases/download" not in script and "urlopen" not in script


@pytest.mark.parametrize(("capability", "arch"), [("8.0", "80"), ("8.6", "80"), ("9.0", "90")])
def test_compiles_for_this_gpu_only(tmp_path: Path, capability: str, arch: str) -> None:
    code, out, uv, _ = run(tmp_path, capability=capability, jobs="3")
    assert code == 0, out
    assert [c["argv"] for c in uv] == [
        ["sync", "--inexact"],
        ["cache", "clean", "flash-attn"],
        ["sync", "--extra", "gpu", "--reinstall-package", "flash-attn"],
    ]
    assert gpu_sync(uv)["env"] == {
        "FLASH_ATTENTION_FORCE_BUILD": "TRUE",
        "FLASH_ATTENTION_SKIP_CUDA_BUILD": "FALSE",
        "FLASH_ATTN_CUDA_ARCHS": arch,
        "MAX_JOBS": "3",  # flash-attn's own memory bound, computed from the node
    }
    assert f"for sm_{arch} with nvcc 12.8" in out
    assert "verified" in out


def test_explicit_arch_and_max_jobs_win(tmp_path: Path) -> None:
    env = {"MAX_JOBS": "1"}
    code, out, uv, python = run(tmp_path, "--cuda-arch", "90", capability="", extra_env=env)
    assert code == 0, out
    assert gpu_sync(uv)["env"]["FLASH_ATTN_CUDA_ARCHS"] == "90"
    assert gpu_sync(uv)["env"]["MAX_JOBS"] == "1"
    assert not [c for c in python if "virtual_memory" in c["code"]]


def test_no_gpu_and_no_arch_is_refused(tmp_path: Path) -> None:
    code, out, uv, _ = run(tmp_path, capability="")
    assert code == 1
    assert "torch sees no GPU" in out and "--cuda-arch 80" in out
    assert [c["argv"] for c in uv] == [["sync", "--inexact"]]


@pytest.mark.parametrize(("nvcc", "message"), [(None, "no nvcc"), ("13.0", "nvcc 13.0 at")])
def test_without_a_usable_nvcc_it_says_what_to_install(
    tmp_path: Path, nvcc: str | None, message: str
) -> None:
    code, out, uv, _ = run(tmp_path, nvcc=nvcc)
    assert code == 1, out
    assert "FAILED at step: find nvcc" in out and message in out
    assert "cuda-toolkit-12-8" in out and "--no-flash-attn" in out
    assert [c["argv"] for c in uv] == [["sync", "--inexact"]]


def test_no_flash_attn_installs_vllm_only(tmp_path: Path) -> None:
    code, out, uv, _ = run(tmp_path, "--no-flash-attn", nvcc=None, capability="")
    assert code == 0, out
    assert [c["argv"] for c in uv] == [
        ["sync", "--inexact"],
        ["sync", "--extra", "gpu", "--no-install-package", "flash-attn"],
    ]
    assert "+attention=sdpa" in out


def test_sdpa_overlay_is_the_cpu_paths_attention() -> None:
    """The fallback's overlay composes on every GPU experiment and sets what the CPU path runs."""
    from rlvr.config.compose import compose, experiments, validate

    for experiment in experiments():
        config = compose(experiment, ["+attention=sdpa"])
        validate(config)
        model = config.actor_rollout_ref.model
        assert model.use_remove_padding is False
        assert model.override_config.attn_implementation == "sdpa"


def test_hollow_build_fails_and_is_purged(tmp_path: Path) -> None:
    """A flash-attn without its compiled extension must not pass."""
    code, out, uv, _ = run(tmp_path, build="hollow")
    assert code == 1, out
    assert "FAILED at step: import flash_attn_2_cuda" in out
    assert "No module named 'flash_attn_2_cuda'" in out
    argv = [c["argv"] for c in uv]
    after = argv[argv.index(["sync", "--extra", "gpu", "--reinstall-package", "flash-attn"]) :]
    assert ["cache", "clean", "flash-attn"] in after
    assert any(a[:2] == ["pip", "uninstall"] and a[-1] == "flash-attn" for a in after)
    assert not (tmp_path / "flash_attn_state").exists()


def test_failed_steps_are_named(tmp_path: Path) -> None:
    code, out, _, _ = run(tmp_path / "sync", uv_gpu="fail")
    assert code == 1
    assert "FAILED at step: uv sync --extra gpu" in out and "MAX_JOBS=2" in out
    code, out, _, _ = run(tmp_path / "vllm", vllm="fail")
    assert code == 1
    assert "FAILED at step: import vllm" in out
    assert "--reinstall-package vllm" in out


def test_working_install_is_kept(tmp_path: Path) -> None:
    (tmp_path / "flash_attn_state").write_text("ok")
    code, out, uv, _ = run(tmp_path, "--", "--locked")
    assert code == 0, out
    assert [c["argv"] for c in uv] == [
        ["sync", "--inexact", "--locked"],
        ["sync", "--extra", "gpu", "--locked"],
    ]
    assert "already imports: keeping it" in out

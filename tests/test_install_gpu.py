"""scripts/install_gpu.sh with stub `uv`, `nvcc` and venv python: which flash-attn build
variables it picks on a node with and without nvcc, and that a broken result fails loudly."""

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
WHEEL_URL = (
    f"https://github.com/Dao-AILab/flash-attention/releases/download/v{FA_VERSION}/"
    f"flash_attn-{FA_VERSION}+cu12torch2.8cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"
)

# The venv python: answers the script's torch query, URL probe and import checks from FAKE_*
# variables; flash-attn's state (absent, ok, hollow) lives in a file that the uv stub writes.
FAKE_PYTHON = """
import json, os, sys
from pathlib import Path

code, args = sys.argv[2], sys.argv[3:]
state = Path(os.environ["FAKE_STATE"])
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"tool": "python", "code": code, "args": args}) + "\\n")
if "GLIBCXX_USE_CXX11_ABI" in code:
    print("TORCH=2.8.0+cu128\\nTORCH_CUDA=12.8\\nCXX11ABI=TRUE\\nPYTAG=cp311\\nMACHINE=x86_64")
    print("CUDA_HOME_SEEN=" + os.environ.get("FAKE_CUDA_HOME", ""))
elif "urlopen" in code:
    if os.environ.get("FAKE_PROBE") == "fail":
        sys.exit("   cannot fetch it from this node: <urlopen error dns>")
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
env = {k: v for k, v in os.environ.items() if k.startswith("FLASH_ATTENTION_")}
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


def run(tmp_path: Path, *args: str, nvcc: str | None = "12.8", **fake: str):
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
    for bad in (["--bogus"], ["--prebuilt-only", "extra"]):
        code, out, uv, _ = run(tmp_path, *bad)
        assert code == 2, out
        assert "unknown argument" in out
        assert uv == []


def test_with_nvcc_downloads_or_compiles(tmp_path: Path) -> None:
    code, out, uv, python = run(tmp_path)
    assert code == 0, out
    assert [c["argv"] for c in uv] == [
        ["sync", "--inexact"],
        ["cache", "clean", "flash-attn"],
        ["sync", "--extra", "gpu", "--reinstall-package", "flash-attn"],
    ]
    assert gpu_sync(uv)["env"] == {
        "FLASH_ATTENTION_SKIP_CUDA_BUILD": "FALSE",
        "FLASH_ATTENTION_FORCE_BUILD": "FALSE",
    }
    assert WHEEL_URL in out
    assert [c["args"] for c in python if "urlopen" in c["code"]] == [[WHEEL_URL]]
    assert "nvcc 12.8 at" in out
    assert "verified" in out


def test_with_nvcc_and_no_github_compiles_directly(tmp_path: Path) -> None:
    code, out, uv, _ = run(tmp_path, probe="fail")
    assert code == 0, out
    assert gpu_sync(uv)["env"]["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"
    assert gpu_sync(uv)["env"]["FLASH_ATTENTION_SKIP_CUDA_BUILD"] == "FALSE"
    assert "compiling from source" in out


@pytest.mark.parametrize(
    ("nvcc", "flags"), [(None, ()), ("13.0", ()), ("12.8", ("--prebuilt-only",))]
)
def test_without_usable_nvcc_uses_the_prebuilt_wheel_only(
    tmp_path: Path, nvcc: str | None, flags: tuple[str, ...]
) -> None:
    """No nvcc, an nvcc whose CUDA major differs from torch's, or --prebuilt-only."""
    code, out, uv, _ = run(tmp_path, *flags, nvcc=nvcc)
    assert code == 0, out
    assert gpu_sync(uv)["env"] == {
        "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE",
        "FLASH_ATTENTION_FORCE_BUILD": "FALSE",
    }
    assert "prebuilt wheel only" in out
    assert WHEEL_URL in out
    if nvcc == "13.0":
        assert "unusable: torch is built with CUDA 12.8" in out


@pytest.mark.parametrize("nvcc", [None, "12.8"])
def test_unreachable_prebuilt_wheel_without_compiler_fails_before_syncing(
    tmp_path: Path, nvcc: str | None
) -> None:
    flags = () if nvcc is None else ("--prebuilt-only",)
    code, out, uv, _ = run(tmp_path, *flags, nvcc=nvcc, probe="fail")
    assert code == 1, out
    assert "FAILED at step: download the prebuilt flash-attn wheel" in out
    assert f"{WHEEL_URL} could not be fetched" in out
    assert [c["argv"] for c in uv] == [["sync", "--inexact"]]


def test_hollow_wheel_fails_and_is_purged(tmp_path: Path) -> None:
    """setup.py's silent fallback (a wheel without flash_attn_2_cuda) must not pass."""
    code, out, uv, _ = run(tmp_path, nvcc=None, build="hollow")
    assert code == 1, out
    assert "FAILED at step: import flash_attn_2_cuda" in out
    assert "No module named 'flash_attn_2_cuda'" in out
    assert WHEEL_URL in out
    argv = [c["argv"] for c in uv]
    after = argv[argv.index(["sync", "--extra", "gpu", "--reinstall-package", "flash-attn"]) :]
    assert ["cache", "clean", "flash-attn"] in after
    assert any(a[:2] == ["pip", "uninstall"] and a[-1] == "flash-attn" for a in after)
    assert not (tmp_path / "flash_attn_state").exists()


def test_failed_steps_are_named(tmp_path: Path) -> None:
    code, out, _, _ = run(tmp_path / "sync", uv_gpu="fail")
    assert code == 1
    assert "FAILED at step: uv sync --extra gpu" in out
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


def test_installation_doc_names_the_script() -> None:
    doc = (ROOT / "docs" / "INSTALLATION.md").read_text()
    assert "bash scripts/install_gpu.sh" in doc

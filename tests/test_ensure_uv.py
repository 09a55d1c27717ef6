"""The set-up commands: scripts/lib/ensure_uv.sh (sourced by test.sh and quickstart.sh) and
scripts/test.sh, which CI runs. A fake `uv` on PATH stands in for the real one."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _source_with_fake_uv(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text(f'#!/bin/sh\necho "uv $*" >> {tmp_path / "calls"}\n{body}\n')
    uv.chmod(0o755)
    script = "source scripts/lib/ensure_uv.sh || exit 7; echo after"
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    return subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )


def test_ensure_uv_is_silent_when_the_sync_passes(tmp_path: Path) -> None:
    done = _source_with_fake_uv(tmp_path, "echo 'Resolved 300 packages'; exit 0")
    assert (done.returncode, done.stdout, done.stderr) == (0, "after\n", "")
    assert (tmp_path / "calls").read_text() == "uv sync --locked --inexact\n"


def test_ensure_uv_shows_the_sync_output_and_fails_when_it_fails(tmp_path: Path) -> None:
    done = _source_with_fake_uv(tmp_path, "echo 'lock file out of date' >&2; exit 1")
    assert done.returncode == 7 and done.stdout == ""
    assert "lock file out of date" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("ensure_uv: uv sync --locked failed")


def test_test_sh_help_answers_without_syncing() -> None:
    done = subprocess.run(
        ["bash", "scripts/test.sh", "--help"],
        cwd=ROOT,
        env={**os.environ, "PATH": "/usr/bin:/bin"},  # no uv: --help must not need it
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("Everything CI runs") and '-m "not slow"' in done.stdout


def test_ci_runs_the_readme_test_command() -> None:
    commands = [
        line
        for line in (ROOT / ".ci/run").read_text().splitlines()
        if line and not line.startswith(("#", "set ", "cd "))
    ]
    assert commands == ["bash scripts/test.sh"]
    assert "bash scripts/test.sh" in (ROOT / "README.md").read_text()

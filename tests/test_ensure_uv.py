"""The set-up commands: scripts/lib/ensure_uv.sh (sourced by test.sh, quickstart.sh and the
launchers) and scripts/test.sh, which CI runs. A fake `uv` on PATH stands in for the real one."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART_TESTS = "tests/test_quickstart.py"  # slow and fast tests in one file
STUB_EXIT = 97  # what the fake interpreter and ray exit with: the script got past uv


def _unsynced() -> dict[str, str]:
    """This environment without the mark of a sync already done (conftest sets it)."""
    return {k: v for k, v in os.environ.items() if k != "RLVR_UV_SYNCED"}


def _fake_uv_env(tmp_path: Path, body: str = "") -> dict[str, str]:
    """An unsynced environment whose only ``uv`` logs each call to tmp_path/calls, then runs
    ``body`` (shell)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text(f'#!/bin/sh\necho "uv $*" >> {tmp_path / "calls"}\n{body}\n')
    uv.chmod(0o755)
    return {**_unsynced(), "PATH": f"{bin_dir}:/usr/bin:/bin"}


def _source_with_fake_uv(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = "source scripts/lib/ensure_uv.sh || exit 7; echo after"
    env = _fake_uv_env(tmp_path, body)
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


def _test_sh_with_fake_uv(tmp_path: Path, *args: str) -> list[str]:
    """The uv commands ``scripts/test.sh ARGS`` runs, with a fake uv that passes them all."""
    done = subprocess.run(
        ["bash", "scripts/test.sh", *args],
        cwd=ROOT,
        env=_fake_uv_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return (tmp_path / "calls").read_text().splitlines()


def test_test_sh_runs_the_fast_tier_in_parallel_then_the_slow_tier_alone(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    calls = _test_sh_with_fake_uv(tmp_path)
    pytest_calls = [c for c in calls if c.startswith("uv run pytest")]
    assert pytest_calls == [
        "uv run pytest --durations=30 -m not slow",  # -n auto from pyproject.toml's addopts
        "uv run pytest --durations=30 -m slow -n 0",
    ]
    assert calls.index("uv sync --locked --inexact") < calls.index(pytest_calls[0])
    addopts = " ".join(pytestconfig.getini("addopts"))  # pyproject.toml's, as pytest reads it
    assert "-n auto --dist loadgroup" in addopts
    # autoload off: xdist (and the others the suite uses) must then be named
    assert "--disable-plugin-autoload -p xdist -p timeout -p hypothesispytest" in addopts


def test_test_sh_passes_given_arguments_to_one_pytest_run(tmp_path: Path) -> None:
    calls = _test_sh_with_fake_uv(tmp_path, "-m", "not slow", "-k", "rewards")
    assert [c for c in calls if c.startswith("uv run pytest")] == [
        "uv run pytest --durations=30 -m not slow -k rewards"
    ]


def _scheduled() -> dict[str, str]:
    """test_quickstart.py's tests (slow and fast) as xdist schedules them under pyproject.toml's
    ``--dist loadgroup``: function name -> its group ("" for none; a grouped test's id ends with
    ``@GROUP``). ``--setup-plan``: the worker receives the tests and runs none."""
    options = ["-n", "1", "-v", "--setup-plan", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *options, QUICKSTART_TESTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    ids = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("tests/")]
    groups = {}
    for test_id in ids:
        name = test_id.split("::")[1].split("[")[0].split("@")[0]
        groups[name] = test_id.rpartition("@")[2] if "@" in test_id.split("]")[-1] else ""
    return groups


def test_slow_tests_and_only_they_share_one_xdist_group() -> None:
    """conftest puts every slow test in the group "slow", before xdist reads the groups (its hook
    runs first: before, xdist saw no group, and the slow tests of a plain ``pytest`` ran two at
    once); xdist then runs them on one worker, in turn."""
    import test_quickstart

    groups = _scheduled()
    slow = {
        name
        for name in groups
        if any(
            mark.name == "slow"
            for mark in getattr(getattr(test_quickstart, name), "pytestmark", [])
        )
    }
    assert slow and len(slow) < len(groups)  # the file holds both kinds
    assert groups == {name: "slow" if name in slow else "" for name in groups}


def test_ci_runs_the_readme_test_command() -> None:
    commands = [
        line
        for line in (ROOT / ".ci/run").read_text().splitlines()
        if line and not line.startswith(("#", "set ", "cd "))
    ]
    assert commands == ["bash scripts/test.sh"]
    assert "bash scripts/test.sh" in (ROOT / "README.md").read_text()


def _id(value: object) -> str:
    return (" ".join(value) or "no-args") if isinstance(value, list) else str(value)


def _launch_with_fake_uv(
    tmp_path: Path, script: str, *argv: str, synced: str | None = None
) -> tuple[int, list[str]]:
    """Runs scripts/SCRIPT behind a fake uv (sync passes; run answers a fake interpreter) and
    fake python and ray that exit STUB_EXIT; returns the exit code and every call, in order."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    stubs = {
        "uv": f'echo "uv $*" >> {calls}\n[ "$1" = run ] && echo {bin_dir}/python\nexit 0',
        "python": f'echo "python $*" >> {calls}\nexit {STUB_EXIT}',
        "ray": f'echo "ray $*" >> {calls}\nexit {STUB_EXIT}',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**_unsynced(), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    if synced is not None:
        env["RLVR_UV_SYNCED"] = synced
    done = subprocess.run(
        ["bash", f"scripts/{script}", *argv],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done.returncode, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize(
    ("script", "argv"),
    [
        ("rehearse.sh", ["--help"]),  # its help is Python's (argparse)
        ("rehearse.sh", ["countdown_cpu"]),
        ("train.sh", ["countdown_cpu"]),
        ("train.sh", ["countdown_cpu", "--print_config"]),
        ("launch_sft.sh", ["countdown_smollm2_cpu"]),
        ("ray_cluster.sh", ["status"]),
        ("ray_cluster.sh", ["head", "--port", "6390"]),
    ],
    ids=_id,
)
def test_launchers_sync_the_locked_environment_before_their_first_uv_run(
    tmp_path: Path, script: str, argv: list[str]
) -> None:
    """In a fresh clone, `uv run --no-sync` makes an empty .venv (ModuleNotFoundError: psutil):
    each launcher syncs first, as test.sh and quickstart.sh do."""
    code, calls = _launch_with_fake_uv(tmp_path, script, *argv)
    assert calls[:1] == ["uv sync --locked --inexact"], calls
    assert len(calls) >= 2 and calls[1].startswith("uv run "), calls
    assert code in (0, STUB_EXIT), (code, calls)


def test_a_launcher_run_by_a_synced_parent_does_not_sync_again(tmp_path: Path) -> None:
    """quickstart.sh and test.sh export RLVR_UV_SYNCED=ROOT after their sync: the launchers they
    run skip theirs (about 3 s each); a mark naming another checkout is no reason to skip."""
    for marked, expected in ((str(ROOT), []), ("/elsewhere", ["uv sync --locked --inexact"])):
        folder = tmp_path / marked.strip("/").replace("/", "_")
        folder.mkdir()
        code, calls = _launch_with_fake_uv(folder, "train.sh", "countdown_cpu", synced=marked)
        assert code in (0, STUB_EXIT), (code, calls)
        assert [c for c in calls if c.startswith("uv sync")] == expected, calls
        assert any(c.startswith("uv run ") for c in calls), calls


@pytest.mark.parametrize(
    ("script", "argv", "code"),
    [
        ("train.sh", ["--help"], 0),
        ("train.sh", [], 2),
        ("launch_sft.sh", ["--help"], 0),
        ("launch_sft.sh", ["--bad"], 2),
        ("ray_cluster.sh", ["--help"], 0),
        ("ray_cluster.sh", ["head", "--port", "0"], 2),
        ("ray_cluster.sh", ["worker", "nohost"], 2),
        ("ray_cluster.sh", ["status", "extra"], 2),
    ],
    ids=_id,
)
def test_help_and_bad_arguments_answer_before_any_uv(
    tmp_path: Path, script: str, argv: list[str], code: int
) -> None:
    """Help written in bash, and the one-line refusals bash makes, need no sync (nor uv)."""
    assert _launch_with_fake_uv(tmp_path, script, *argv) == (code, [])

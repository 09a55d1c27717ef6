"""The bash launchers' contract with a cluster, with stand-in `uv`, python and `ray` that record
how they were called (no Ray starts): the launcher's environment travels in Ray's runtime env,
the trainer runs on the environment's python (not `uv run`), and the head runs the job server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.train import launch

ROOT = Path(__file__).resolve().parents[1]


def _stubs(tmp_path: Path) -> dict[str, str]:
    """`uv run ... python -c ...` answers with a fake interpreter that logs each call; a fake
    `ray` beside it (where the scripts look for the project's CLI) logs its arguments."""
    bin_dir = tmp_path / "bin"
    venv_bin = tmp_path / "venv/bin"
    bin_dir.mkdir()
    venv_bin.mkdir(parents=True)
    log = tmp_path / "calls.jsonl"
    recorder = (
        "import json, os, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps({{'argv': sys.argv[1:], "
        "'uv_hook': os.environ.get('RAY_ENABLE_UV_RUN_RUNTIME_ENV'), "
        "'wandb': [os.environ.get('WANDB_MODE'), os.environ.get('WANDB_DIR')]}) + '\\n')\n"
        "if '-c' in sys.argv: print(0)\n"
    )
    (venv_bin / "recorder.py").write_text(recorder)
    fake_python = venv_bin / "python"
    fake_python.write_text(f'#!/usr/bin/env bash\nexec python3 {venv_bin}/recorder.py "$0" "$@"\n')
    (venv_bin / "ray").write_text(
        f'#!/usr/bin/env bash\nexec python3 {venv_bin}/recorder.py ray "$@"\n'
    )
    (bin_dir / "uv").write_text(f"#!/usr/bin/env bash\necho {fake_python}\n")
    for path in (fake_python, venv_bin / "ray", bin_dir / "uv"):
        path.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "NCCL_", "HF_"))}
    return env | {"PATH": f"{bin_dir}:{env['PATH']}", "HOME": str(tmp_path)}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def _calls(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


def test_launcher_hands_over_to_the_supervisor_with_the_projects_python(tmp_path: Path) -> None:
    env = _stubs(tmp_path) | {"RLVR_LOG_DIR": str(tmp_path / "logs")}
    done = _run(["scripts/train.sh", "countdown_qwen3_4b", "trainer.total_training_steps=2"], env)
    assert done.returncode == 0, done.stderr
    launch = next(c for c in _calls(tmp_path) if "rlvr.train.launch" in c["argv"])
    assert launch["argv"][0].endswith("venv/bin/python")  # not `uv run`: no uv path to workers
    assert launch["uv_hook"] == "0"
    assert launch["wandb"] == ["offline", str(tmp_path / "logs")]  # exported to what it runs
    _, _, _, experiment, log, *overrides = launch["argv"]
    assert experiment == "countdown_qwen3_4b" and overrides == ["trainer.total_training_steps=2"]
    assert Path(log).parent == tmp_path / "logs" and log.endswith(".log")


def test_the_driver_gets_the_environment_through_the_runtime_env() -> None:
    environ = {
        "WANDB_MODE": "offline",
        "WANDB_DIR": "/logs",
        "NCCL_SOCKET_IFNAME": "eth1",
        "HF_HOME": "/shared/hf cache",
        "UNRELATED": "x",
    }
    command = launch.driver_command("countdown_qwen3_4b", [*launch.forwarded(environ), "a=1"])
    assert command[:3] == [sys.executable, "-m", "rlvr.train.main"]
    prefix = "++ray_kwargs.ray_init.runtime_env.env_vars."
    assert {a for a in command if a.startswith(prefix)} == {
        f"{prefix}WANDB_MODE='offline'",
        f"{prefix}WANDB_DIR='/logs'",
        f"{prefix}NCCL_SOCKET_IFNAME='eth1'",
        f"{prefix}HF_HOME='/shared/hf cache'",
    }
    assert command[-1] == "a=1"  # user overrides come last and win


@pytest.mark.parametrize(
    ("overrides", "environ", "own"),
    [
        ([], {}, True),  # a local Ray: its own temp dir, the marker of its processes
        (["+ray_kwargs.ray_init._temp_dir=/tmp/mine"], {}, False),  # the user's is kept
        ([], {"RAY_ADDRESS": "auto"}, False),  # a cluster's daemons are not this run's
    ],
)
def test_a_local_ray_gets_a_temp_dir_of_its_own(
    overrides: list[str], environ: dict[str, str], own: bool
) -> None:
    marker, added = launch.own_ray_temp_dir(overrides, environ)
    if own:
        assert Path(marker).is_dir() and marker.startswith("/tmp/rlvr-ray-")
        assert added == [f"++ray_kwargs.ray_init._temp_dir={marker}"]
        Path(marker).rmdir()
    else:
        assert added == [] and marker == ("/tmp/mine" if overrides else "")


def test_the_lora_merge_runs_with_the_users_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr.train import lora_merge

    calls: list[list[str]] = []
    monkeypatch.setattr(lora_merge, "main", lambda argv: calls.append(argv) or 0)
    assert launch.merge_lora("countdown_qwen3_4b_lora", ["trainer.total_training_steps=2"]) == 0
    assert calls == [["--experiment", "countdown_qwen3_4b_lora", "trainer.total_training_steps=2"]]


def test_forwarded_values_survive_hydra_parsing() -> None:
    """A quoted override as the launcher writes it composes to the exact value."""
    from rlvr.config.compose import compose

    value = "/data/it's here,a=b"
    quoted = value.replace("\\", "\\\\").replace("'", "\\'")
    config = compose(
        "countdown_cpu", [f"++ray_kwargs.ray_init.runtime_env.env_vars.WANDB_DIR='{quoted}'"]
    )
    forwarded = config.ray_kwargs.ray_init.runtime_env.env_vars.WANDB_DIR
    assert forwarded == value


def test_cluster_head_runs_the_job_server_with_the_projects_ray(tmp_path: Path) -> None:
    env = _stubs(tmp_path)
    done = _run(["scripts/ray_cluster.sh", "head", "--port", "6390", "--num-gpus", "8"], env)
    assert done.returncode == 0, done.stderr
    (start,) = [c["argv"] for c in _calls(tmp_path) if c["argv"][1:2] == ["start"]]
    assert start[0] == "ray" and "--include-dashboard=true" in start
    assert "--num-gpus" in start and "8" in start  # a given count is not re-detected
    bad = _run(["scripts/ray_cluster.sh", "head", "--port", "x"], env)
    assert bad.returncode == 2 and "--port must be a number" in bad.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["scripts/ray_cluster.sh", "head", "--port", "x"], "--port must be a number"),
        (["scripts/ray_cluster.sh", "head", "--port"], "--port must be a number"),
        (["scripts/ray_cluster.sh", "head", "--port", "70000"], "from 1 to 65535"),
        (["scripts/ray_cluster.sh", "worker"], "worker needs the head's HOST:PORT"),
        (["scripts/ray_cluster.sh", "worker", "10.0.0.1"], "worker needs the head's HOST:PORT"),
        (["scripts/ray_cluster.sh", "stop", "--force"], "stop takes no arguments"),
        (["scripts/ray_cluster.sh", "strat"], "unknown command 'strat'"),
        (["scripts/ray_cluster.sh"], "unknown command ''"),
        (["scripts/train.sh"], "no experiment given"),
    ],
)
def test_bad_launcher_arguments_are_one_line_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """Nothing runs: no `ray` call, no pre-flight, no trainer."""
    done = _run(args, _stubs(tmp_path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    calls = tmp_path / "calls.jsonl"
    argvs = [c["argv"] for c in _calls(tmp_path)] if calls.exists() else []
    assert not [a for a in argvs if a[:1] == ["ray"] or "-m" in a]  # only `python -c` probes


def test_good_worker_address_reaches_ray(tmp_path: Path) -> None:
    """Control for the refusals above: a HOST:PORT passes to `ray start`."""
    env = _stubs(tmp_path)
    done = _run(["scripts/ray_cluster.sh", "worker", "10.0.0.1:6379", "--num-gpus=0"], env)
    assert done.returncode == 0, done.stderr
    (start,) = [c["argv"] for c in _calls(tmp_path) if c["argv"][1:2] == ["start"]]
    assert "--address=10.0.0.1:6379" in start

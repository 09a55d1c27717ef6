"""Pre-flight refuses, one class of mistake per test, what verl or transformers would fail on
only after Ray starts (or never, training silently wrong); each with a passing control."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlvr.models.hub import model_path_problem
from rlvr.tasks import TaskError, TaskSpec
from rlvr.train import preflight
from rlvr.train.config import ConfigError, compose, compose_checked
from rlvr.train.preflight import numeric_problems, ray_plan, verl_problems

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_ray_or_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray"))
    for name in ("RAY_ADDRESS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "models" / "good"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"")
    return folder


# --- model path -----------------------------------------------------------------------------


def test_model_folders_and_hub_ids(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert model_path_problem(str(model_dir)) is None  # control: a complete folder
    assert model_path_problem("models/good") is None  # relative to where the launcher runs
    assert model_path_problem("Qwen/Qwen3-4B-Instruct-2507") is None  # online hub id
    (tmp_path / "models/empty").mkdir()
    (tmp_path / "models/noweights").mkdir()
    (tmp_path / "models/noweights/config.json").write_text("{}")
    cases = {
        "models/tny": "no such folder",  # one slash, but its parent exists: a typo, not a hub id
        "./tiny": "no such folder",
        "/no/such/model": "no such folder",
        "~/models/tiny": "starts with ~",
        "models/empty": "no config.json",
        "models/noweights": "no weights",
        "not a hub id": "neither a local folder nor a hub id",
        "": "is empty",
    }
    for path, message in cases.items():
        problem = model_path_problem(path)
        assert problem is not None and message in problem, (path, problem)
        assert "\n" not in problem


def test_offline_hub_id_must_be_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("rlvr.models.hub._in_hub_cache", lambda repo: repo == "me/cached")
    problem = model_path_problem("Qwen/Qwen3-4B-Instruct-2507")
    assert problem is not None and "HF_HUB_OFFLINE" in problem
    assert model_path_problem("me/cached") is None  # control


# --- numbers verl rejects inside its workers -------------------------------------------------


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor_rollout_ref.rollout.n=0", "actor_rollout_ref.rollout.n=0: must be"),
        ("actor_rollout_ref.rollout.n=-2", "actor_rollout_ref.rollout.n=-2"),
        ("actor_rollout_ref.rollout.n=1", "GRPO compares a group"),
        ("data.train_batch_size=0", "data.train_batch_size=0: must be a number > 0"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size=0", "ppo_mini_batch_size=0"),
        ("actor_rollout_ref.actor.optim.lr=0", "optim.lr=0: must be a number > 0"),
        ("actor_rollout_ref.actor.optim.lr=-1e-5", "optim.lr=-1e-05"),
        ("data.max_response_length=0", "data.max_response_length=0"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3", "must divide the per-rank"),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=0", "log_prob_micro"),
    ],
)
def test_numeric_settings_verl_would_reject(override: str, message: str) -> None:
    problems = numeric_problems(compose("countdown_cpu", [override]))
    assert problems and message in problems[0], problems


def test_numeric_controls_and_verls_own_checks() -> None:
    assert numeric_problems(compose("countdown_cpu")) == []
    assert numeric_problems(compose("countdown_qwen3_4b")) == []
    assert verl_problems(compose("countdown_cpu")) == []
    small = compose(
        "countdown_cpu",
        ["data.train_batch_size=1", "actor_rollout_ref.actor.use_dynamic_bsz=false"],
    )
    (problem,) = verl_problems(small)
    assert "verl refuses this config" in problem and "train_batch_size (1)" in problem


# --- reward kwargs --------------------------------------------------------------------------


def test_reward_kwargs_are_checked_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """The task's check_reward_kwargs runs first (a stand-in here, so this holds whether or
    not the task's own check exists yet); its one line becomes the problem."""

    def check(self: TaskSpec, kwargs: dict) -> None:
        unknown = sorted(set(kwargs) - {"format_score", "shaping"})
        if unknown:
            raise TaskError(f"unknown reward kwarg {unknown[0]!r}; valid: format_score, shaping")

    monkeypatch.setattr(TaskSpec, "check_reward_kwargs", check, raising=False)
    typo = compose("countdown_cpu", ["+custom_reward_function.reward_kwargs.formt_score=0.1"])
    problems = preflight._reward_problems(typo, preflight.tasks.for_config(typo))
    assert problems == [
        "custom_reward_function.reward_kwargs: unknown reward kwarg 'formt_score'; valid: "
        "format_score, shaping"
    ]
    good = compose("countdown_cpu")
    assert preflight._reward_problems(good, preflight.tasks.for_config(good)) == []


def test_a_misspelled_reward_kwarg_with_the_real_check() -> None:
    typo = compose("countdown_cpu", ["+custom_reward_function.reward_kwargs.formt_score=0.1"])
    problems = preflight._reward_problems(typo, preflight.tasks.for_config(typo))
    assert len(problems) == 1 and "formt_score" in problems[0] and "format_score" in problems[0]


# --- a running Ray cluster ------------------------------------------------------------------


@pytest.fixture
def listening() -> Iterator[str]:
    """An address where something accepts connections, as a live Ray GCS would."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def _dead_address() -> str:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"127.0.0.1:{port}"


def test_ray_plan(tmp_path: Path, listening: str) -> None:
    config = compose("countdown_qwen3_4b")
    env = {"RAY_TMPDIR": str(tmp_path)}
    plan, problem = ray_plan(config, env)
    assert problem is None and "starting a local Ray" in plan  # control: nothing recorded
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray/ray_current_cluster").write_text(listening)
    _, problem = ray_plan(config, env)
    assert problem is not None and f"is running at {listening}" in problem
    assert "RAY_ADDRESS=auto" in problem and "_temp_dir" in problem
    plan, problem = ray_plan(config, {**env, "RAY_ADDRESS": "auto"})
    assert problem is None and f"joining the Ray cluster at {listening}" in plan
    own = compose("countdown_qwen3_4b", [f"+ray_kwargs.ray_init._temp_dir={tmp_path / 'own'}"])
    assert ray_plan(own, env)[1] is None  # its own temp dir: its own Ray
    (tmp_path / "ray/ray_current_cluster").write_text(_dead_address())
    _, problem = ray_plan(config, env)
    assert problem is not None and "nothing answers" in problem


def test_ray_address_that_cannot_be_joined(tmp_path: Path, listening: str) -> None:
    config = compose("countdown_qwen3_4b")
    env = {"RAY_TMPDIR": str(tmp_path)}
    _, problem = ray_plan(config, {**env, "RAY_ADDRESS": "auto"})
    assert problem is not None and "RAY_ADDRESS=auto: no Ray cluster answers" in problem
    dead = _dead_address()
    _, problem = ray_plan(config, {**env, "RAY_ADDRESS": dead})
    assert problem is not None and f"no Ray cluster answers at {dead}" in problem
    assert ray_plan(config, {**env, "RAY_ADDRESS": listening})[1] is None  # control
    cpu = compose("countdown_cpu")  # sets ray_init.num_gpus: Ray refuses it when joining
    _, problem = ray_plan(cpu, {**env, "RAY_ADDRESS": listening})
    assert problem is not None and "num_cpus, num_gpus" in problem


# --- Hydra errors, one line -----------------------------------------------------------------


@pytest.mark.parametrize(
    "experiment, overrides, message",
    [
        ("countdown_cpuu", [], "unknown experiment 'countdown_cpuu' (did you mean countdown_cpu?)"),
        (
            "countdown_cpu",
            ["actor_rollout_ref.rollout.nn=2"],
            "override actor_rollout_ref.rollout.nn: countdown_cpu has no such key (did you mean "
            "actor_rollout_ref.rollout.n?)",
        ),
        ("countdown_cpu", ["base_model=tinyy"], "base_model=tinyy: no such option (did you mean"),
        ("countdown_cpu", ["base_modle=tiny"], "(did you mean base_model?)"),
        ("countdown_cpu", ["+data.train_batch_size=3"], "already exists; write"),
        ("countdown_cpu", ["data.train_batch_size=[1,"], "not valid Hydra syntax"),
    ],
)
def test_composition_errors_are_one_line(
    experiment: str, overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        compose_checked(experiment, overrides)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_main_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert preflight.main(["nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "countdown_cpu" in err  # lists the valid names
    assert preflight.main(["countdown_cpu", "trainer.total_training_stepz=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean trainer.total_training_steps?" in err
    assert compose_checked("countdown_cpu", ["trainer.total_training_steps=3"])  # control


def test_data_that_is_not_parquet(tmp_path: Path, model_dir: Path) -> None:
    fake = tmp_path / "train.parquet"
    fake.write_text("question,answer\n1,2\n")
    (tmp_path / "folder.parquet").mkdir()
    config = compose(
        "countdown_cpu",
        [f"data.train_files={fake}", f"data.val_files={tmp_path / 'folder.parquet'}"],
    )
    problems = preflight._data_problems(config, preflight.tasks.for_config(config))
    assert problems[0].startswith(f"data.train_files: {fake} is not a Parquet file")
    assert problems[1].startswith(f"data.val_files: {tmp_path / 'folder.parquet'} is a folder")


def test_launcher_stops_at_an_unknown_experiment(tmp_path: Path) -> None:
    """The real launcher: one line, exit 2, before wandb, logs or Ray."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/launch_grpo.sh"), "countdown_cpuu", "trainer.x=1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "unknown experiment 'countdown_cpuu' (did you mean countdown_cpu?)" in done.stderr
    assert "wandb:" not in done.stdout and "log:" not in done.stdout

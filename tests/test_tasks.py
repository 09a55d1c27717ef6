"""The registry's contract, checked for every registered task: a new task is tested by
registering it, with no list here to edit."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rlvr import tasks
from rlvr.config.compose import compose, experiments
from rlvr.data.prep import DATA_COLUMNS
from rlvr.evaluation.settings import overlay_settings
from rlvr.tasks import TaskSpec, prep_cli

SPECS = tasks.all_specs()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_default_experiment_composes_with_the_tasks_own_reward(spec: TaskSpec) -> None:
    assert spec.default_experiment in experiments()
    assert tasks.for_config(compose(spec.default_experiment)) is spec
    assert spec.overlay.is_file()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_offline_data_is_graded_by_the_tasks_reward(spec: TaskSpec, tmp_path: Path) -> None:
    spec.offline_data(tmp_path / spec.name, 6, 4)
    reward = spec.load_reward()
    kwargs = overlay_settings(spec).reward_kwargs
    frame = pd.read_parquet(tmp_path / spec.name / "train.parquet")
    assert len(frame) == 6 and set(DATA_COLUMNS) <= set(frame.columns)
    assert set(frame["data_source"]) == {spec.data_source}
    for row in frame.to_dict("records"):
        truth = row["reward_model"]["ground_truth"]
        graded = reward(spec.data_source, "no answer here", truth, row["extra_info"], **kwargs)
        assert graded["score"] == 0.0, graded  # a non-answer scores nothing...
        assert graded.get("bad_ground_truth", 0.0) == 0.0, graded  # ...and the truth is gradable


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_prep_cli_lists_the_tasks_flags(spec: TaskSpec, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        prep_cli.main(spec.name, ["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert spec.summary in out and "--local_dir" in out


def test_the_config_names_its_task() -> None:
    config = compose("countdown_cpu")
    assert config.recipe.task == "countdown" and tasks.for_config(config) is tasks.get("countdown")
    # negative control: the name alone is not enough when the reward was swapped
    config.custom_reward_function.path = str(tasks.get("gsm8k").reward_file)
    assert tasks.for_config(config) is None  # a reward not the task's own: graded by no task


def test_a_config_with_another_paths_root_finds_its_task(tmp_path: Path) -> None:
    config = compose("countdown_cpu", root=tmp_path)
    assert str(tmp_path) in str(config.custom_reward_function.path)
    assert tasks.for_config(config) is tasks.get("countdown")


def test_a_foreign_reward_without_a_task_key_is_no_task(tmp_path: Path) -> None:
    """As before the key existed: a config without a task overlay grades with no task's reward."""
    config = compose("countdown_cpu", [f"custom_reward_function.path={tmp_path / 'mine.py'}"])
    assert tasks.for_config(config) is None
    del config.recipe
    assert tasks.for_config(config) is None


@pytest.mark.parametrize(
    ("name", "message"),
    [("parity", r"unknown task 'parity'; the tasks are \['countdown', 'gsm8k'\]"), ("", "empty")],
)
def test_an_unknown_or_empty_task_name_is_one_line(name: str, message: str) -> None:
    config = compose("countdown_cpu")
    config.recipe.task = name
    with pytest.raises(tasks.TaskError, match=message) as error:
        tasks.for_config(config)
    assert "\n" not in str(error.value)


def test_a_task_listed_twice_is_refused() -> None:
    countdown = tasks.get("countdown")
    clash = TaskSpec(**{**countdown.__dict__, "summary": "another countdown"})
    with pytest.raises(tasks.TaskError, match="registered twice"):
        tasks._by_name([countdown, clash])
    assert tasks.SPECS.count(countdown) == 1


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("size", ["-3", "10000001", "ten"])
def test_split_sizes_are_checked_before_any_work(
    spec: TaskSpec, size: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A negative size used to slice rows away silently; now the flag is named, nothing runs."""
    with pytest.raises(SystemExit) as exit_:
        prep_cli.main(spec.name, ["--train_size", size, "--local_dir", str(tmp_path / "out")])
    assert exit_.value.code == 2 and "--train_size" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_check_reward_kwargs_refuses_a_typo_listing_the_valid_names(spec: TaskSpec) -> None:
    kwargs = overlay_settings(spec).reward_kwargs
    spec.check_reward_kwargs(kwargs)  # negative control: the overlay's own kwargs pass
    spec.check_reward_kwargs({})
    with pytest.raises(tasks.TaskError, match=r"unknown reward kwarg 'formt_score'.*valid: ") as e:
        spec.check_reward_kwargs({**kwargs, "formt_score": 0.1})
    assert "format_score" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(tasks.TaskError, match="format_score"):
        spec.check_reward_kwargs({"format_score": 7})  # a bad value, by name


def _reward_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "reward.py"
    path.write_text(body)
    return path


def test_check_reward_kwargs_of_a_reward_without_a_validator(tmp_path: Path) -> None:
    """A foreign reward is checked by its signature; one taking ``**kwargs`` accepts any name."""
    from rlvr.tasks.spec import check_reward_kwargs

    strict = _reward_file(
        tmp_path,
        "def compute_score(data_source, solution_str, ground_truth, extra_info, scale=1):"
        "\n    return {'score': 0.0}\n",
    )
    check_reward_kwargs(strict, {"scale": 2}, "mine")
    with pytest.raises(
        tasks.TaskError, match="unknown reward kwarg 'sacle' for mine; valid: scale"
    ):
        check_reward_kwargs(strict, {"sacle": 2}, "mine")
    loose = tmp_path / "loose"
    loose.mkdir()
    any_name = _reward_file(loose, "def compute_score(*args, **kwargs):\n    return {}\n")
    check_reward_kwargs(any_name, {"whatever": 1}, "mine")

"""rlvr/train/trainer.py and rlvr/train/main.py: the recipes' TaskRunner and trainer subclasses
around verl's own methods, and the run report the entry point writes in the driver."""

from __future__ import annotations

import json
import os
import shutil
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.main_ppo import TaskRunner
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils import tracking

from rlvr.config.compose import compose
from rlvr.report.records import read_rollouts
from rlvr.train import main as entry_point
from rlvr.train import trainer as recipe

ROOT = Path(__file__).resolve().parents[1]


def test_recipe_logs_json_lines_beside_the_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """verl merges the runtime env away from the config root, so ``${...}`` in its env_vars
    would arrive unresolved: the TaskRunner sets VERL_FILE_LOGGER_PATH itself, over any
    inherited value."""
    config = compose("countdown_cpu", ["trainer.default_local_dir=/runs/a"])
    assert "file" in config.trainer.logger
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", "/inherited/elsewhere.jsonl")
    assert recipe.set_metrics_path(config) == "/runs/a/metrics.jsonl"
    assert recipe.set_metrics_path(OmegaConf.create({"paths": {}})) is None
    assert entry_point.run_dir(config) == "/runs/a"


def test_prune_keeps_the_newest_steps_and_every_kth(tmp_path: Path) -> None:
    for step in range(1, 31):
        (tmp_path / f"{step}.jsonl").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("not a dump")
    deleted = recipe.prune_step_files(str(tmp_path), keep_last=5, keep_every=10)
    kept = sorted(int(p.stem) for p in tmp_path.glob("*.jsonl"))
    assert kept == [10, 20, 26, 27, 28, 29, 30]
    assert len(deleted) == 23 and (tmp_path / "notes.txt").exists()
    # Negative control: keeping everything deletes nothing.
    assert recipe.prune_step_files(str(tmp_path), keep_last=100, keep_every=0) == []


def _dump_nine_steps(trainer_class: type, rollouts: Path, val: Path) -> None:
    """verl's real ``_dump_generations`` (through ``trainer_class``) for steps 1-9, to the
    rollout folder and a validation folder, with a dapo-style tensor in the reward extras."""
    config = OmegaConf.create(
        {
            "trainer": {"rollout_data_dir": str(rollouts)},
            "rollout_dumps": {"keep_last": 3, "keep_every": 4},
        }
    )
    trainer: Any = trainer_class.__new__(trainer_class)  # no workers: only the dump runs
    trainer.config = config
    for step in range(1, 10):
        trainer.global_steps = step
        for folder in (rollouts, val):
            trainer._dump_generations(
                inputs=["p"],
                outputs=["o"],
                gts=["g"],
                scores=[1.0],
                reward_extra_infos_dict={"overlong_reward": [torch.tensor(-0.5)]},
                dump_path=str(folder),
            )


def test_rollout_dumps_stay_bounded_through_verls_own_dump(tmp_path: Path) -> None:
    """verl's ``_dump_generations`` writes a file per step and never deletes (and refuses the
    dapo manager's tensors); the recipes' trainer keeps what ``rollout_dumps`` says and writes
    plain numbers; validation dumps elsewhere are untouched."""
    rollouts, val = tmp_path / "rollouts", tmp_path / "val"
    _dump_nine_steps(recipe.RecipeTrainer, rollouts, val)
    assert sorted(int(p.stem) for p in rollouts.glob("*.jsonl")) == [4, 7, 8, 9]
    assert len(list(val.glob("*.jsonl"))) == 9
    assert '"overlong_reward": -0.5' in (rollouts / "9.jsonl").read_text()
    with pytest.raises(TypeError, match="Tensor is not JSON serializable"):  # verl's own
        _dump_nine_steps(RayPPOTrainer, tmp_path / "verl", tmp_path / "verl_val")


class _Decoder:
    def batch_decode(self, ids: torch.Tensor, skip_special_tokens: bool = True) -> list[str]:
        return [" ".join(str(int(i)) for i in row if i) for row in ids]


def _log_rollout_batch(trainer_class: type, folder: Path) -> list[dict[str, Any]]:
    """verl's real ``_log_rollout_data`` (through ``trainer_class``) on a batch of three
    responses of width 4: one filled it (cut at max_response_length), two ended before."""
    import numpy as np
    from verl import DataProto

    responses = torch.tensor([[7, 8, 9, 9], [7, 2, 0, 0], [7, 0, 0, 0]])
    response_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    batch = DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([[5, 6]] * 3),
            "responses": responses,
            "attention_mask": torch.cat([torch.ones(3, 2, dtype=torch.long), response_mask], 1),
            "token_level_scores": torch.tensor([[0, 0, 0, 0.0], [0, 1.0, 0, 0], [0, 0, 0, 0]]),
        },
        non_tensors={"reward_model": np.array([{"ground_truth": "1"}] * 3, dtype=object)},
    )
    trainer: Any = trainer_class.__new__(trainer_class)  # no workers: only the dump runs
    trainer.config = OmegaConf.create({"trainer": {"rollout_data_dir": str(folder)}})
    trainer.tokenizer, trainer.global_steps = _Decoder(), 3
    extras = {"acc": [0.0, 1.0, 0.0]}
    trainer._log_rollout_data(batch, extras, {}, str(folder))
    assert extras == {"acc": [0.0, 1.0, 0.0]}  # the caller's dict is not changed
    return [json.loads(line) for line in (folder / "3.jsonl").read_text().splitlines()]


def test_rollout_dumps_carry_each_responses_length_and_cut(tmp_path: Path) -> None:
    """The report's alarm on cut answers needs per-response truncation, which verl's dump lacks
    (negative control: verl's own trainer writes neither field)."""
    lines = _log_rollout_batch(recipe.RecipeTrainer, tmp_path / "recipe")
    assert [(line["response_length"], line["truncated"]) for line in lines] == [
        (4, True),
        (2, False),
        (1, False),
    ]
    assert [line["acc"] for line in lines] == [0.0, 1.0, 0.0]
    assert [line["score"] for line in lines] == [0.0, 1.0, 0.0]
    plain = _log_rollout_batch(RayPPOTrainer, tmp_path / "verl")
    assert all("truncated" not in line and "response_length" not in line for line in plain)
    # the report reads the flag back
    dumped = read_rollouts(tmp_path / "recipe")[0][3]
    assert [r.truncated for r in dumped] == [True, False, False]


def test_the_task_runner_runs_verls_with_the_recipes_trainer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RecipeTaskRunner.run`` calls verl's ``TaskRunner.run`` with the recipes' trainer and
    the fixed file logger in place, the metrics path set and the estimators registered; after
    it, verl's names are verl's again."""
    seen: dict[str, Any] = {}

    def verl_run(self: Any, config: Any) -> None:
        # Stands in for verl's run, which builds its trainer by its module's name (the guard
        # checks that line and that name); here that name is this module's, never called.
        if config is None:
            trainer = RayPPOTrainer(config)  # noqa: F841
        from verl.trainer import main_ppo
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

        seen["trainer"] = main_ppo.RayPPOTrainer
        seen["file_logger"] = tracking.FileLogger
        seen["estimator"] = "grpo_drop_constant" in ADV_ESTIMATOR_REGISTRY
        seen["metrics"] = os.environ["VERL_FILE_LOGGER_PATH"]

    monkeypatch.setattr(TaskRunner, "run", verl_run)
    config = OmegaConf.create({"paths": {"metrics": str(tmp_path / "m.jsonl")}})
    recipe.RecipeTaskRunner().run(config)
    assert seen["trainer"] is recipe.RecipeTrainer
    assert seen["file_logger"] is not tracking.FileLogger
    assert seen["estimator"] and seen["metrics"] == str(tmp_path / "m.jsonl")


def _changed_dump(self, inputs, outputs, scores, dump_path): ...  # type: ignore[no-untyped-def]


def _changed_log(self, batch, reward_extra_infos_dict, rollout_data_dir): ...  # type: ignore[no-untyped-def]


@pytest.mark.parametrize(
    ("method", "changed", "refused"),
    [
        ("_dump_generations", _changed_dump, r"'scores', 'dump_path'\) is not "),
        ("_log_rollout_data", _changed_log, r"'rollout_data_dir'\) is not "),
    ],
    ids=["dump", "log rollout data"],
)
def test_dump_override_refuses_a_changed_verl(
    monkeypatch: pytest.MonkeyPatch, method: str, changed: Any, refused: str
) -> None:
    recipe.check_verl()  # verl 0.6.1's passes
    monkeypatch.setattr(RayPPOTrainer, method, changed)
    with pytest.raises(RuntimeError, match=refused + r".*rlvr/train/trainer\.py"):
        recipe.check_verl()


def test_the_driver_writes_the_run_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the entry point does when training returns: report.md beside the checkpoints; a run
    it cannot read only prints a line."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests/data/report/quickstart_smollm2", run)
    entry_point.write_run_report(str(run))
    entry_point.write_run_report(str(tmp_path / "missing"))  # must not raise
    out = capsys.readouterr().out
    assert f"rlvr: run report {run}/report.md" in out
    assert f"rlvr: no run report for {tmp_path / 'missing'}" in out
    assert (run / "report.md").is_file() and (run / "reward.png").is_file()


class _Workers:
    """Stands in for the actor worker group: writes a checkpoint folder where verl asks."""

    def save_checkpoint(self, local_path: str, *args: Any, **kwargs: Any) -> None:
        os.makedirs(local_path, exist_ok=True)
        Path(local_path, "model.pt").write_text("weights")


def _resumed_save(trainer_class: type, root: Path, keep: int | None) -> list[str]:
    """verl's real ``_save_checkpoint`` at step 3 of a run resumed from step 2, with steps 1
    and 2 saved by the process before it; returns the checkpoint folders left."""
    for step in (1, 2):
        (root / f"global_step_{step}/actor").mkdir(parents=True)
    trainer: Any = trainer_class.__new__(trainer_class)
    trainer.config = OmegaConf.create(
        {"trainer": {"default_local_dir": str(root), "default_hdfs_dir": None,
                     "max_actor_ckpt_to_keep": keep, "max_critic_ckpt_to_keep": keep}}
    )  # fmt: skip
    trainer.global_steps, trainer.use_critic = 3, False
    trainer.actor_rollout_wg = _Workers()
    trainer.train_dataloader = type("Loader", (), {"state_dict": lambda self: {"epoch": 0}})()
    trainer._save_checkpoint()
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "3"
    return sorted(path.name for path in root.iterdir() if path.is_dir())


@pytest.mark.parametrize(
    ("keep", "kept"),
    [
        (2, ["global_step_2", "global_step_3"]),
        (1, ["global_step_3"]),
        (None, ["global_step_1", "global_step_2", "global_step_3"]),  # keep all: verl's default
        (0, ["global_step_1", "global_step_2", "global_step_3"]),
    ],
)
def test_checkpoints_saved_before_a_resume_count_against_the_limit(
    tmp_path: Path, keep: int | None, kept: list[str]
) -> None:
    assert _resumed_save(recipe.RecipeTrainer, tmp_path, keep) == kept


def test_verl_alone_keeps_checkpoints_from_before_a_resume(tmp_path: Path) -> None:
    """Negative control: verl's rotation only knows what this process saved."""
    kept = _resumed_save(RayPPOTrainer, tmp_path, 2)
    assert kept == ["global_step_1", "global_step_2", "global_step_3"]


def test_a_half_deleted_checkpoint_is_out_of_sight_and_cleared_next_time(tmp_path: Path) -> None:
    (tmp_path / f"{recipe.DELETING_PREFIX}global_step_7/actor").mkdir(parents=True)
    for name in ("global_step_8", "global_step_9", "global_step_x"):
        (tmp_path / name).mkdir()
    assert recipe.prune_checkpoints(str(tmp_path), keep=1) == ["global_step_8"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_9", "global_step_x"]


@pytest.mark.parametrize(("setting", "epochs", "planned"), [(5, 2, 5), (50, 2, 8), (3, 1, 3)])
def test_fit_writes_the_steps_verl_will_train(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: int, epochs: int, planned: int
) -> None:
    """verl stops at total_training_steps or at the end of the epochs (4 batches each here),
    whichever comes first: a plan of more steps would call every finished run cut short."""
    from rlvr.report.run_plan import read_run_plan

    monkeypatch.setattr(RayPPOTrainer, "fit", lambda self: None)
    trainer: Any = recipe.RecipeTrainer.__new__(recipe.RecipeTrainer)
    trainer.config = compose(
        "gsm8k_qwen2_5_3b",
        [
            f"paths.metrics={tmp_path / 'new_run/metrics.jsonl'}",  # a folder not made yet
            f"trainer.default_local_dir={tmp_path}",
            f"trainer.total_epochs={epochs}",
        ],
    )
    trainer.total_training_steps, trainer.train_dataloader = setting, [0, 1, 2, 3]
    trainer.fit()
    plan, note = read_run_plan(tmp_path / "new_run")
    assert note is None and plan is not None and plan.total_training_steps == planned
    # what the reference bands match on: verl's GSM8K table has this model
    assert (plan.model, plan.task) == ("Qwen/Qwen2.5-3B-Instruct", "gsm8k")
    assert plan.answer_protocol == "rlvr-gsm8k-strict"
    # what the throughput verdict matches on and names (Ray is not up here: the overlay's GPU)
    assert plan.gpu == "A100 80GB" and plan.settings is not None
    assert plan.settings["enforce_eager"] is False and plan.settings["use_dynamic_bsz"] is True


def _worker_disk_full() -> BaseException:
    """A real ENOSPC (a write to /dev/full), wrapped as Ray hands a worker's error back."""
    from ray.exceptions import RayTaskError

    try:
        with open("/dev/full", "w") as full:
            full.write("checkpoint shard")
    except OSError as exc:
        return RayTaskError("save_checkpoint", "".join(traceback.format_exception(exc)), exc)
    raise AssertionError("/dev/full took the write")


def test_a_full_disk_during_training_is_one_line(tmp_path: Path, tiny_model_dir: Path) -> None:
    config = compose(
        "countdown_cpu",
        [f"trainer.default_local_dir={tmp_path}", f"actor_rollout_ref.model.path={tiny_model_dir}"],
    )
    line = entry_point.disk_full_line(config, _worker_disk_full())
    assert line is not None and line.startswith(f"disk full writing {tmp_path}: needs about ")
    assert "\n" not in line
    assert entry_point.disk_full_line(config, RuntimeError("worker died")) is None  # control

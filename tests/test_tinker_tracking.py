"""rlvr/tinker/tracking.py, without a server: a Tinker run's loggers are verl's own Tracking,
built from the recipe as verl's trainer builds it (the file logger with the recipes' fix), its
WandB id kept for a resume, verl's own choice of validation generations, and one line for a
logger verl does not know. WandB itself, offline and read back from its run files, is checked
end to end against TuFT's server (test_tinker_e2e)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from rlvr.config.compose import compose
from rlvr.report.metrics_log import read_steps
from rlvr.tinker import tracking
from rlvr.tinker.recipe import TinkerRecipe
from rlvr.tinker.service import TinkerRunError
from rlvr.tinker.tracking import RUN_ID_FILE, RunLog, environment, wandb_run_id


def recipe(tmp_path: Path, *extra: str) -> TinkerRecipe:
    runs = [f"paths.checkpoints={tmp_path}", "trainer.experiment_name=t", *extra]
    return TinkerRecipe.from_config(compose("countdown_qwen3_4b_tinker", runs))


def test_a_resume_keeps_the_runs_id_and_a_new_run_gets_its_own(tmp_path: Path) -> None:
    first = wandb_run_id(tmp_path, resuming=False)
    assert (tmp_path / RUN_ID_FILE).read_text() == first + "\n"
    assert wandb_run_id(tmp_path, resuming=True) == first
    fresh = wandb_run_id(tmp_path, resuming=False)  # no checkpoint to resume: a new run
    assert fresh != first and wandb_run_id(tmp_path, resuming=True) == fresh


def test_the_environment_is_set_within_and_restored_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLVR_T_SET", "before")
    monkeypatch.delenv("RLVR_T_UNSET", raising=False)
    with environment({"RLVR_T_SET": "within", "RLVR_T_UNSET": "within"}):
        assert (os.environ["RLVR_T_SET"], os.environ["RLVR_T_UNSET"]) == ("within", "within")
    assert os.environ["RLVR_T_SET"] == "before" and "RLVR_T_UNSET" not in os.environ


def test_the_file_logger_writes_metrics_jsonl_through_verls_tracking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """trainer.logger without wandb: verl's console and (fixed) file loggers, no WandB id."""
    r = recipe(tmp_path, "trainer.logger=[console,file]")
    log = RunLog(r, resuming=False)
    log.log({"critic/score/mean": 0.5, "training/global_step": 1}, step=1)
    log.finish(0)
    assert [(s.step, s.metrics["critic/score/mean"]) for s in read_steps(r.metrics_path)] == [
        (1, 0.5)
    ]
    assert "step:1 - critic/score/mean:0.5 - " in capsys.readouterr().out  # verl's console line
    assert not (r.run_dir / RUN_ID_FILE).exists()


def test_a_logger_verl_does_not_know_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TinkerRunError, match=r"^trainer.logger=\['wandbb'\]: verl does not know "
                       r"wandbb \(it knows wandb, mlflow, "):  # fmt: skip
        RunLog(recipe(tmp_path, "trainer.logger=[wandbb]"), resuming=False)


def test_validation_generations_are_chosen_by_verls_own_method(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = RunLog(recipe(tmp_path, "trainer.logger=[file]", "trainer.log_val_generations=3"), False)
    handed: list[Any] = []
    monkeypatch.setattr(log.generations, "log", lambda *args: handed.append(args))
    inputs = [f"prompt {i}" for i in range(10)]
    log.log_generations(inputs, [f"answer {i}" for i in range(10)], [i / 10 for i in range(10)], 4)
    log.finish(0)
    ((loggers, samples, step),) = handed
    assert (loggers, step, len(samples)) == (["file"], 4, 3)
    assert all(s == (f"prompt {i}", f"answer {i}", i / 10) for s in samples
               for i in [int(s[0].split()[1])])  # fmt: skip
    assert len({s[0] for s in samples}) == 3


def test_a_verl_whose_choice_of_generations_changed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def changed(self: Any, inputs: list[str], outputs: list[str], scores: list[float]) -> None:
        self.generations_logger.log(self.config.trainer.logger, inputs, self.global_steps)

    log = RunLog(recipe(tmp_path, "trainer.logger=[file]"), resuming=False)
    monkeypatch.setattr(RayPPOTrainer, "_maybe_log_val_generations", changed)
    with pytest.raises(RuntimeError, match=f"update {tracking.OWNER}"):
        log.log_generations(["p"], ["a"], [1.0], 1)
    log.finish(0)


def test_the_docs_list_the_names_a_verl_and_a_tinker_run_share() -> None:
    """docs/TINKER.md's list is the one both e2e runs are checked against."""
    from wandb_run_file import VERL_AND_TINKER_METRICS

    text = (Path(__file__).resolve().parents[1] / "docs/TINKER.md").read_text()
    block = text.split("**The metric names a verl run and a Tinker run share**", 1)[1]
    listed = block.split("```text\n", 1)[1].split("```", 1)[0].split()
    assert listed == sorted(listed) and set(listed) == set(VERL_AND_TINKER_METRICS)

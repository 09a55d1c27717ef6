"""Traps a new user fell into at be84258, each refused now with one line (and a passing control):
a run that trains 0 steps (verl's drop_last loader over fewer rows than a batch), resuming
another run's checkpoints from a shared folder, and the GPU quickstart's dry run that did not
say where checkpoints go and took flags it then ignored. (--help on every launcher:
tests/test_script_help.py.) Pre-flight runs in-process; nothing trains."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from script_loading import run_quickstart

from rlvr.preflight import checks as preflight

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("preflight_env")


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """countdown_cpu on 8 generated train rows and a loadable-looking model folder."""
    from rlvr.tasks.countdown import prepare

    root = tmp_path_factory.mktemp("traps")
    prepare("generate", str(root / "data"), train_size=8, test_size=4)
    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    (model / "tokenizer_config.json").write_text("{}")
    header = json.dumps({"w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode())
    return [
        f"data.train_files={root / 'data/train.parquet'}",
        f"data.val_files={root / 'data/test.parquet'}",
        f"actor_rollout_ref.model.path={model}",
    ]


def _preflight(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = preflight.main(["countdown_cpu", *argv])
    return code, capsys.readouterr().err


# --- 0 training steps ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.train_batch_size=16"], "8 train row(s) make no whole batch of data.train_bat"),
        (["data.train_max_samples=1"], "1 train row(s) (data.train_max_samples) make no whole"),
        (["trainer.total_epochs=0"], "trainer.total_epochs=0; set it to 1 or more"),
    ],
)  # fmt: skip
def test_a_run_that_would_train_0_steps_is_refused(
    good: list[str], overrides: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """verl's loader drops the incomplete batch: 8 rows at batch 16 are 0 steps, and verl says
    so ("Train dataloader is empty!") only after Ray and the workers have started."""
    code, err = _preflight([*good, *overrides], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "0 training steps: " in err and message in err
    if "train_batch_size" in message:
        assert "set data.train_batch_size to at most 8" in err


def test_a_batch_that_fits_the_rows_passes(good: list[str], capsys: pytest.CaptureFixture[str]):
    """Control: 8 rows at batch 8 are one step an epoch."""
    code, err = _preflight([*good, "data.train_batch_size=8"], capsys)
    assert code == 0, err


def test_steps_are_counted_as_verl_counts_them(good: list[str]) -> None:
    from rlvr.config.compose import compose
    from rlvr.preflight.steps import step_count

    def steps(*overrides: str) -> int:
        count = step_count(compose("countdown_cpu", [*good, *overrides]))
        assert count is not None
        return count.steps

    uncapped = "trainer.total_training_steps=null"
    assert steps("data.train_batch_size=3", "trainer.total_epochs=2", uncapped) == 4  # 2 an epoch
    one = "trainer.total_epochs=1"
    assert steps("data.train_batch_size=3", one, "trainer.total_training_steps=3") == 2  # epoch
    assert steps("data.train_batch_size=2", one, "trainer.total_training_steps=3") == 3  # cap
    assert steps("data.train_batch_size=2", one, uncapped, "+data.gen_batch_size=4") == 2


# --- resuming another run's checkpoints ------------------------------------------------------


def _checkpoints(folder: Path, identity: dict[str, Any] | None) -> None:
    (folder / "global_step_2/actor").mkdir(parents=True)
    (folder / "latest_checkpointed_iteration.txt").write_text("2")
    if identity is not None:
        (folder / "rlvr_run.json").write_text(json.dumps(identity))


def test_another_models_checkpoints_are_not_resumed(
    good: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another model's step-2 checkpoint in the folder: verl's auto-resume would load it."""
    from rlvr.config.compose import compose

    run = tmp_path / "run"
    folder = [f"trainer.default_local_dir={run}"]
    other = compose("countdown_cpu", [*good, *folder])
    theirs = {"model": "Qwen/Qwen3-4B-Instruct-2507", "task": "countdown", "lora_rank": 0,
              "nodes_x_gpus": f"{other.trainer.nnodes}x{other.trainer.n_gpus_per_node}",
              "experiment": str(other.trainer.experiment_name)}  # fmt: skip
    _checkpoints(run, theirs)
    code, err = _preflight([*good, *folder], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "holds checkpoints up to global_step_2 of another run (model Qwen/Qwen3-4B" in err
    assert "trainer.default_local_dir=" in err and "trainer.resume_mode=disable" in err
    # the two ways out, and the run that wrote them resuming: all pass
    assert _preflight([*good, *folder, "trainer.resume_mode=disable"], capsys)[0] == 0
    assert _preflight([*good, f"trainer.default_local_dir={tmp_path / 'new'}"], capsys)[0] == 0
    assert _preflight([*good, *folder, f"actor_rollout_ref.model.path={theirs['model']}"],
                      capsys)[1].count("another run") == 0  # fmt: skip


def test_checkpoints_without_an_identity_are_not_resumed(
    good: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    _checkpoints(run, None)
    code, err = _preflight([*good, f"trainer.default_local_dir={run}"], capsys)
    assert code == 2 and "no readable rlvr_run.json saying which run wrote them" in err, err


def test_the_trainer_writes_the_identity_pre_flight_reads(
    good: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round trip: what ``RecipeTrainer.fit`` writes at the start of a run lets the same run
    resume, and refuses a run with another LoRA rank."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from rlvr.config.compose import compose
    from rlvr.preflight.run_identity import identity_problems
    from rlvr.train import trainer as recipe

    run = tmp_path / "run"
    overrides = [*good, f"trainer.default_local_dir={run}", f"paths.metrics={tmp_path}/m.jsonl"]
    monkeypatch.setattr(RayPPOTrainer, "fit", lambda self: None)
    trainer: Any = recipe.RecipeTrainer.__new__(recipe.RecipeTrainer)
    trainer.config = compose("countdown_cpu", overrides)
    trainer.total_training_steps, trainer.train_dataloader = 2, [0, 1]
    trainer.fit()
    (run / "global_step_2/actor").mkdir(parents=True)
    assert identity_problems(trainer.config) == []
    lora = compose("countdown_cpu", [*overrides, "adapter=lora32"])
    (problem,) = identity_problems(lora)
    assert "lora_rank 0 there, 32 now" in problem


def test_a_run_that_saves_nothing_leaves_no_checkpoint_folder(
    good: list[str], tmp_path: Path
) -> None:
    """A sweep point or test with save_freq=-1 gets no checkpoint folder made for its identity
    (CI's sweep test caught one); a run that saves gets its identity written."""
    from rlvr.config.compose import compose
    from rlvr.preflight.run_identity import IDENTITY_FILE, write_identity

    run = tmp_path / "run"
    into_run = [*good, f"trainer.default_local_dir={run}"]
    quiet = compose("countdown_cpu", [*into_run, "trainer.save_freq=-1"])
    assert write_identity(quiet) is None and not run.exists()
    saving = compose("countdown_cpu", [*into_run, "trainer.save_freq=2"])
    assert write_identity(saving) == run / IDENTITY_FILE and (run / IDENTITY_FILE).is_file()


# --- the GPU quickstart's dry run ------------------------------------------------------------


_quickstart = run_quickstart


def test_gpu_dry_run_names_checkpoints_downloads_and_what_follows() -> None:
    done = _quickstart("--gpus", "1", "--dry_run")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "checkpoints: " in out and "artifacts/checkpoints/" in out
    assert "countdown_qwen2_5_3b_lora_1gpu" in out and "auto-resume" in out
    assert "downloads: " in out and "Qwen/Qwen2.5-3B-Instruct" in out
    assert "after training: " in out


@pytest.mark.parametrize(("flag", "value"), [("--out", "/tmp/somewhere"), ("--model", "tiny")])
def test_gpu_path_refuses_flags_it_would_ignore(flag: str, value: str) -> None:
    done = _quickstart("--gpus", "1", flag, value, "--dry_run")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert flag in done.stderr and "GPU" in done.stderr

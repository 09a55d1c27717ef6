"""The Ray setup hook: imports neither torch nor verl, and its patches land when verl loads.

Each case that imports verl runs in a fresh interpreter, as a Ray worker would run the hook.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from rlvr.report.metrics_log import read_steps
from rlvr.train import verl_hooks

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, env: dict[str, str] | None = None) -> dict:
    import os

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RLVR_")}
    full_env |= env or {}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cpu_compat", ["0", "1"])
def test_hook_leaves_torch_and_verl_unimported(cpu_compat: str) -> None:
    """A GPU worker runs the hook before Ray sets CUDA_VISIBLE_DEVICES: importing torch (via
    verl.utils.device) there would pin every rank to GPU 0. a3b0be1's hook imported both."""
    result = _run(
        """
        import json, sys
        from rlvr.train import verl_hooks
        verl_hooks.install()
        print(json.dumps({m: m in sys.modules for m in ("torch", "verl")}))
        """,
        {"RLVR_CPU_COMPAT": cpu_compat},
    )
    assert result == {"torch": False, "verl": False}


def test_wandb_patch_lands_when_verl_is_imported() -> None:
    result = _run(
        """
        import json
        from rlvr.train import verl_hooks
        verl_hooks.install()
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        print(json.dumps({"patched": getattr(RayPPOTrainer.fit, "_rlvr_finishes_wandb", False)}))
        """
    )
    assert result == {"patched": True}


@pytest.mark.no_cuda
def test_cpu_fixes_land_when_verl_is_imported() -> None:
    result = _run(
        """
        import json
        from rlvr.train import verl_hooks
        verl_hooks.install()
        import verl
        import torch.distributed as dist
        from verl.workers.rollout import base
        print(json.dumps({
            "gloo": getattr(dist.init_process_group, "_rlvr_cpu", False),
            "hf_rollout": ("hf", "sync") in base._ROLLOUT_REGISTRY,
        }))
        """,
        {"RLVR_CPU_COMPAT": "1"},
    )
    assert result == {"gloo": True, "hf_rollout": True}


def test_without_the_cpu_overlay_nothing_cpu_specific_is_patched() -> None:
    result = _run(
        """
        import json
        from rlvr.train import verl_hooks
        verl_hooks.install()
        import verl
        import torch.distributed as dist
        print(json.dumps({"gloo": getattr(dist.init_process_group, "_rlvr_cpu", False)}))
        """
    )
    assert result == {"gloo": False}


def test_trace_records_devices_at_hook_and_at_torch_import(tmp_path: Path) -> None:
    """The rehearsal's evidence: CUDA_VISIBLE_DEVICES as seen when torch is first imported."""
    _run(
        """
        import json, os
        from rlvr.train import verl_hooks
        verl_hooks.install()
        os.environ["CUDA_VISIBLE_DEVICES"] = "3"   # what Ray does when the actor starts
        import torch
        print(json.dumps({}))
        """,
        {"RLVR_TRACE_DIR": str(tmp_path), "RANK": "5"},
    )
    (trace,) = tmp_path.glob("*.jsonl")
    hook, imported = (json.loads(line) for line in trace.read_text().splitlines())
    assert (hook["event"], hook["cuda_visible_devices"], hook["torch_loaded"]) == (
        "hook",
        None,
        False,
    )
    assert (imported["event"], imported["cuda_visible_devices"], imported["rank"]) == (
        "torch_imported",
        "3",
        "5",
    )


@pytest.mark.parametrize("hide", [True, False])
def test_rehearsal_hides_the_gpu_ray_assigned_once_traced(tmp_path: Path, hide: bool) -> None:
    """On a GPU node Ray's fake id would name a real GPU: with RLVR_HIDE_GPUS the rank records
    it, then torch sees none (torch reads CUDA_VISIBLE_DEVICES only when CUDA initialises)."""
    seen = _run(
        """
        import json, os
        from rlvr.train import verl_hooks
        verl_hooks.install()
        os.environ["CUDA_VISIBLE_DEVICES"] = "3"   # what Ray does when the actor starts
        import torch
        print(json.dumps({"env": os.environ["CUDA_VISIBLE_DEVICES"],
                          "count": torch.cuda.device_count()}))
        """,
        {"RLVR_TRACE_DIR": str(tmp_path), "RANK": "5"} | ({"RLVR_HIDE_GPUS": "1"} if hide else {}),
    )
    (trace,) = tmp_path.glob("*.jsonl")
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(e["event"], e["cuda_visible_devices"]) for e in events[1:]] == (
        [("torch_imported", "3"), ("gpus_hidden", "")] if hide else [("torch_imported", "3")]
    )
    assert seen["env"] == ("" if hide else "3")
    if hide:
        assert seen["count"] == 0


def test_rehearsal_launches_hide_the_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr.train.rehearsal_launch import _env
    from rlvr.train.rehearsal_plan import make_plan

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # a user's own choice on a GPU node
    env = _env(make_plan("countdown_qwen3_4b", tmp_path, 8))
    assert env["RLVR_HIDE_GPUS"] == "1" and "CUDA_VISIBLE_DEVICES" not in env


# What verl 0.6.1 logs on a CPU training step, by type: trainer.balance_batch's
# log_seqlen_unbalance gives 0-d torch tensors (int64, and float32 for the mean), reduce_metrics
# np.float64 (a float subclass: fine), and validation can give np.float32 (Agent-R1 issue 83).
VERL_STEP = """
    import numpy as np, torch
    DATA = {
        "global_seqlen/min": torch.tensor(20520328),
        "global_seqlen/mean": torch.tensor(20520328.0),
        "actor/pg_loss": np.float64(-0.5),
        "val-core/countdown/acc/mean@1": np.float32(0.25),
        "actor/grad_norm": float("nan"),
        "training/global_step": 1,
    }
"""


def test_unpatched_file_logger_crashes_on_verl_metrics(tmp_path: Path) -> None:
    """Negative control: without the hook, verl 0.6.1's FileLogger raises on a real step's
    metrics (its bare json.dumps), and cannot open a VERL_FILE_LOGGER_PATH in a new folder."""
    result = _run(
        textwrap.dedent(VERL_STEP)
        + textwrap.dedent(f"""
        import json, os
        from verl.utils.tracking import FileLogger
        errors = {{}}
        try:
            json.dumps({{"step": 1, "data": DATA}})
        except TypeError as exc:
            errors["dumps"] = str(exc)
        os.environ["VERL_FILE_LOGGER_PATH"] = {str(tmp_path / "raw.jsonl")!r}
        logger = FileLogger("p", "e")
        try:
            logger.log(data=DATA, step=1)
        except TypeError as exc:
            errors["log"] = str(exc)
        os.environ["VERL_FILE_LOGGER_PATH"] = {str(tmp_path / "new/raw.jsonl")!r}
        try:
            FileLogger("p", "e")
        except FileNotFoundError as exc:
            errors["new_folder"] = type(exc).__name__
        print(json.dumps(errors))
        """)
    )
    assert result == {
        "dumps": "Object of type Tensor is not JSON serializable",
        "log": "Object of type Tensor is not JSON serializable",
        "new_folder": "FileNotFoundError",
    }


def test_file_logger_fix_writes_plain_numbers_flushed_and_appended(tmp_path: Path) -> None:
    path = tmp_path / "new/folder/metrics.jsonl"
    result = _run(
        textwrap.dedent(VERL_STEP)
        + textwrap.dedent(f"""
        import json, os
        from rlvr.train import verl_hooks
        verl_hooks.install()
        from verl.utils.tracking import FileLogger
        os.environ["VERL_FILE_LOGGER_PATH"] = {str(path)!r}
        logger = FileLogger("p", "e")
        logger.log(data=DATA, step=1)
        before_finish = open({str(path)!r}).read().count("\\n")  # a run that dies keeps it
        logger.finish()
        resumed = FileLogger("p", "e")  # a resumed run appends
        resumed.log(data={{"critic/score/mean": np.float32(0.5)}}, step=2)
        resumed.finish()
        print(json.dumps({{"before_finish": before_finish}}))
        """)
    )
    assert result == {"before_finish": 1}
    text = path.read_text()
    assert '"global_seqlen/min": 20520328,' in text  # an int, as the tensor held
    assert '"actor/grad_norm": NaN' in text
    one, two = read_steps(path)
    assert (one.step, two.step) == (1, 2)
    assert one.metrics["global_seqlen/mean"] == 20520328.0
    assert one.metrics["val-core/countdown/acc/mean@1"] == 0.25
    assert math.isnan(one.metrics["actor/grad_norm"]) and two.metrics == {"critic/score/mean": 0.5}


def test_file_logger_patch_refuses_a_changed_verl() -> None:
    class FileLogger:  # a later verl's logger with another log signature
        def __init__(self, project_name: str, experiment_name: str) -> None: ...
        def log(self, data: dict, step: int, commit: bool = True) -> None: ...
        def finish(self) -> None: ...

    changed = types.ModuleType("verl.utils.tracking")
    changed.FileLogger = FileLogger  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="PR 4811"):
        verl_hooks._fix_file_logger(changed)
    assert not hasattr(FileLogger.log, "_rlvr_plain_json")
    with pytest.raises(RuntimeError, match="is not the one"):
        verl_hooks._fix_file_logger(types.ModuleType("verl.utils.tracking"))


def test_fit_points_the_file_logger_at_paths_metrics(tmp_path: Path) -> None:
    """verl merges the runtime env away from the config root, so ``${...}`` in its env_vars
    would arrive unresolved: the fit wrapper sets VERL_FILE_LOGGER_PATH in the TaskRunner."""
    result = _run(
        f"""
        import json, os, types
        from omegaconf import OmegaConf
        from rlvr.train import verl_hooks
        verl_hooks.install()
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        config = OmegaConf.create({{"paths": {{"metrics": {str(tmp_path / "m.jsonl")!r}}}}})
        try:  # verl's fit fails at once on this config; the path is set before it runs
            RayPPOTrainer.fit(types.SimpleNamespace(config=config))
        except Exception:
            pass
        print(json.dumps({{"path": os.environ.get("VERL_FILE_LOGGER_PATH")}}))
        """,
        {"VERL_FILE_LOGGER_PATH": "/inherited/elsewhere.jsonl"},
    )
    assert result == {"path": str(tmp_path / "m.jsonl")}


def test_recipe_logs_json_lines_beside_the_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    from omegaconf import OmegaConf

    from rlvr.train.config import compose

    config = compose("countdown_cpu", ["trainer.default_local_dir=/runs/a"])
    OmegaConf.resolve(config)
    assert "file" in config.trainer.logger
    monkeypatch.delenv(verl_hooks.FILE_LOGGER_PATH_ENV, raising=False)
    assert verl_hooks.set_metrics_path(config) == "/runs/a/metrics.jsonl"
    assert verl_hooks.set_metrics_path(OmegaConf.create({"paths": {}})) is None


def test_prune_keeps_the_newest_steps_and_every_kth(tmp_path: Path) -> None:
    for step in range(1, 31):
        (tmp_path / f"{step}.jsonl").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("not a dump")
    deleted = verl_hooks.prune_step_files(str(tmp_path), keep_last=5, keep_every=10)
    kept = sorted(int(p.stem) for p in tmp_path.glob("*.jsonl"))
    assert kept == [10, 20, 26, 27, 28, 29, 30]
    assert len(deleted) == 23 and (tmp_path / "notes.txt").exists()
    # Negative control: keeping everything deletes nothing.
    assert verl_hooks.prune_step_files(str(tmp_path), keep_last=100, keep_every=0) == []


def test_rollout_dumps_stay_bounded_through_verls_own_dump(tmp_path: Path) -> None:
    """verl's real ``_dump_generations`` writes a file per step and never deletes; wrapped, the
    rollout folder keeps what ``rollout_dumps`` says; validation dumps elsewhere are untouched."""
    rollouts, val = tmp_path / "rollouts", tmp_path / "val"
    result = _run(
        f"""
        import json, types
        from omegaconf import OmegaConf
        from rlvr.train import verl_hooks
        verl_hooks.install()
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        config = OmegaConf.create({{
            "trainer": {{"rollout_data_dir": {str(rollouts)!r}}},
            "rollout_dumps": {{"keep_last": 3, "keep_every": 4}},
        }})
        trainer = types.SimpleNamespace(config=config, global_steps=0)
        for step in range(1, 10):
            trainer.global_steps = step
            for folder in ({str(rollouts)!r}, {str(val)!r}):
                RayPPOTrainer._dump_generations(
                    trainer, inputs=["p"], outputs=["o"], gts=["g"], scores=[1.0],
                    reward_extra_infos_dict={{}}, dump_path=folder,
                )
        print(json.dumps({{"ok": True}}))
        """
    )
    assert result == {"ok": True}
    assert sorted(int(p.stem) for p in rollouts.glob("*.jsonl")) == [4, 7, 8, 9]
    assert len(list(val.glob("*.jsonl"))) == 9


def test_dump_bound_refuses_a_changed_verl() -> None:
    class Trainer:  # a later verl with another dump signature
        def _dump_generations(self, inputs, outputs, scores, dump_path): ...  # type: ignore[no-untyped-def]

    with pytest.raises(RuntimeError, match="_dump_generations"):
        verl_hooks._bound_rollout_dumps(Trainer)


def test_end_of_run_report_is_written_and_its_figures_reach_wandb(tmp_path: Path) -> None:
    """What the fit wrapper does when training returns: report.md beside the checkpoints, each
    figure logged to the wandb run as report/<name>; a run it cannot read only prints a line."""
    import shutil

    from rlvr.train.rehearsal_checks import history_rows

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests/data/report/quickstart_smollm2", run)
    result = _run(
        f"""
        import json, wandb
        from rlvr.train import verl_hooks
        wandb.init(mode="offline", dir={str(tmp_path)!r}, project="p")
        verl_hooks.end_of_run_report({str(run)!r})
        verl_hooks.end_of_run_report({str(tmp_path / "missing")!r})  # must not raise
        wandb.finish()
        print(json.dumps({{"ok": True}}))
        """,
        {"WANDB_MODE": "offline", "WANDB_SILENT": "true"},
    )
    assert result == {"ok": True}
    assert (run / "report.md").is_file() and (run / "reward.png").is_file()
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    keys = {key.split("/")[1] for row in history_rows(run_file) for key in row if "report/" in key}
    assert {"reward", "entropy"} <= keys


def test_last_step_report_refuses_a_changed_verl() -> None:
    class Tracking:  # a later verl whose log takes other parameters
        def log(self, data, step, backend=None, commit=True): ...  # type: ignore[no-untyped-def]

    changed = types.ModuleType("verl.utils.tracking")
    changed.Tracking = Tracking  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match=r"Tracking\.log"):
        verl_hooks._report_at_last_step(changed)

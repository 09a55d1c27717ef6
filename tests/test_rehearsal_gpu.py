"""The GPU rehearsal (rehearse.sh --gpu) on CPU: its dry run, its refusal without CUDA, its plan
against verl's own config checks, the same named checks as the CPU rehearsal, and the added
peak-memory check on synthetic metrics with negative controls. It has not run on a GPU."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from config_files import GPU_EXPERIMENTS

from rlvr.rehearsal import gpu as rehearsal_gpu
from rlvr.rehearsal import peak as rehearsal_peak
from rlvr.rehearsal.checks import RehearsalFailure
from rlvr.rehearsal.cpu import main

GIB = 2**30


@pytest.mark.parametrize(
    ("experiment", "topology"),
    [("countdown_qwen3_4b", "1 node(s) x 8 GPUs"), ("gsm8k_qwen2_5_0_5b_1gpu", "1 node(s) x 1")],
)
def test_dry_run_lists_every_check_and_its_tolerance_and_writes_nothing(
    experiment: str, topology: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main([experiment, "--gpu", "--dry_run", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"GPU rehearsal of {experiment} (objective=grpo): dry run" in printed
    assert f"topology: {topology}" in printed
    assert "model: Qwen/Qwen2.5-0.5B-Instruct" in printed
    assert "steps: 2, checkpoint at step 2, then a relaunch resumes and trains step 3" in printed
    assert "base_model=qwen2_5_0_5b_instruct" in printed and "trainer.save_freq=2" in printed
    for name, _ in rehearsal_gpu.CHECKS:
        assert re.search(rf"^    {re.escape(name)} +\S", printed, re.M), name
    assert "within 0.001 of 1" in printed and "disk budget within 10%" in printed
    assert re.search(r"between 0\.90 x [\d.]+ GiB .* and 1\.10 x [\d.]+ GiB", printed)
    assert not out.exists()


def test_dry_run_needs_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["countdown_qwen3_4b", "--dry_run", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "--dry_run goes with --gpu" in capsys.readouterr().err


def _cuda(monkeypatch: pytest.MonkeyPatch, available: bool, count: int) -> list[Any]:
    """Stand-in CUDA; records the plans ``rehearse_gpu`` is given instead of running them."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    ran: list[Any] = []

    def record(plan: Any, timeout_s: float) -> int:
        ran.append(plan)
        return 0

    monkeypatch.setattr(rehearsal_gpu, "rehearse_gpu", record)
    return ran


@pytest.mark.parametrize(
    ("available", "count", "message"),
    [
        (False, 0, "--gpu needs CUDA GPUs and torch sees none here"),
        (True, 1, "--gpu needs 8 GPUs a node, torch sees 1"),
    ],
)
def test_gpu_mode_refuses_without_cuda_in_one_line(
    available: bool,
    count: int,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ran = _cuda(monkeypatch, available, count)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(["countdown_qwen3_4b", "--gpu", "--out", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not ran


def test_gpu_mode_runs_where_cuda_has_the_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: with 8 GPUs the same command reaches the GPU rehearsal, at the real size."""
    ran = _cuda(monkeypatch, True, 8)
    assert main(["countdown_qwen3_4b", "--gpu", "--out", str(tmp_path / "out")]) == 0
    (plan,) = ran
    assert plan.gpu and (plan.nnodes, plan.gpus_per_node) == (1, 8)
    with pytest.raises(SystemExit):
        main(["countdown_qwen3_4b", "--gpu", "--gpus_per_node", "2"])


@pytest.mark.parametrize("experiment", GPU_EXPERIMENTS)
def test_gpu_plan_passes_verls_own_checks_and_swaps_only_the_model_and_data(
    experiment: str, tmp_path: Path
) -> None:
    from rlvr.config.compose import compose, validate
    from rlvr.planning.checkpoint_budget import model_size

    plan = rehearsal_gpu.make_gpu_plan(experiment, tmp_path, "grpo")
    config = compose(experiment, plan.overrides)
    validate(config)  # verl 0.6.1's validate_config and rollout config
    real = compose(experiment, ["objective=grpo"])
    assert config.actor_rollout_ref.model.path == "Qwen/Qwen2.5-0.5B-Instruct"
    size = model_size(config)  # the disk budget sizes the small model, not the experiment's
    assert size is not None and size.parameters == 494032768
    assert config.actor_rollout_ref.rollout.name == "vllm"  # no CPU overlay
    for key in ("trainer.nnodes", "trainer.n_gpus_per_node", "data.train_batch_size"):
        section, name = key.split(".")
        assert config[section][name] == real[section][name], key
    assert config.data.max_response_length == real.data.max_response_length
    assert plan.world_size == plan.real_world_size


def test_gpu_mode_composes_the_cpu_rehearsals_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both flows with every step recorded, not run: the GPU one runs each CPU check but the CPU
    device trace, plus the peak memory, in the order CHECKS lists (what --dry_run prints)."""
    from rlvr.rehearsal import cpu as rehearsal
    from rlvr.rehearsal.plan import make_plan

    names: list[str] = []

    def record(self: Any, name: str, action: Any) -> Any:
        names.append(name)
        self.rows.append((name, "ok", ""))
        return SimpleNamespace(address=None, markers=[], peak_bytes=0, peak_machine_bytes=0)

    monkeypatch.setattr(rehearsal.Runner, "step", record)
    monkeypatch.setattr(rehearsal_gpu, "gpu_pids", set)
    for folder in ("cpu", "gpu"):
        metrics = tmp_path / folder / "checkpoints/countdown_qwen3_4b/metrics.jsonl"
        metrics.parent.mkdir(parents=True)
        metrics.touch()
    assert rehearsal.rehearse(make_plan("countdown_qwen3_4b", tmp_path / "cpu", 8), 1) == 0
    cpu, names[:] = list(names), []
    plan = rehearsal_gpu.make_gpu_plan("countdown_qwen3_4b", tmp_path / "gpu", "grpo")
    assert rehearsal_gpu.rehearse_gpu(plan, 1) == 0
    gpu = [*names, "cleanup"]
    assert gpu == [name for name, _ in rehearsal_gpu.CHECKS]
    assert [n for n in [*cpu, "cleanup"] if n != "devices"] == [
        n for n in gpu if n != "peak memory"
    ]


def test_gradient_scale_on_the_gpu_config(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    """The GPU mode's gradient-scale child process, run here: the composed GPU config's batching
    gives whole gradients; a mini batch of 256 rows (a quarter of each gradient) is caught."""
    plan = rehearsal_gpu.make_gpu_plan("countdown_qwen3_4b", tmp_path, "grpo")
    (tmp_path / "models").mkdir()
    (tmp_path / "models/tiny").symlink_to(tiny_model_dir)
    assert "world 8: 64 prompts x 16 a batch" in rehearsal_gpu.gradient_scale(plan, 600)
    args = [str(tiny_model_dir), "8", "countdown_qwen3_4b", *plan.overrides]
    planted = [*args, "actor_rollout_ref.actor.ppo_mini_batch_size=256"]
    assert rehearsal_gpu._gradient_scale_main(planted) == 1
    assert "sum to 0.25, not 1" in capsys.readouterr().out


def test_gpu_processes_left_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(rehearsal_gpu, "gpu_pids", lambda: {11, 12, os.getpid()})
    assert rehearsal_gpu.gpu_left({11, 12}, grace_s=0) == []  # the rehearsal itself is not left
    assert rehearsal_gpu.gpu_left({11}, grace_s=0) == [12]  # negative control: one stayed


# The peak-memory check on synthetic metrics: gsm8k_qwen2_5_0_5b_1gpu as the GPU rehearsal
# composes it, planned for an H100 80GB (the overlay's declared GPU).
def _setup(tmp_path: Path) -> tuple[Any, Any, rehearsal_peak.CounterView]:
    from rlvr.config.compose import compose
    from rlvr.planning.memory_plan import Machine

    plan = rehearsal_gpu.make_gpu_plan("gsm8k_qwen2_5_0_5b_1gpu", tmp_path, "grpo")
    config = compose(plan.experiment, plan.overrides)
    machine = Machine("H100 80GB", int(79.6 * GIB), 256 * GIB, "test")
    return config, machine, rehearsal_peak.counter_view(config, machine)


def _metrics(path: Path, peaks: list[float | None]) -> Path:
    """verl's file logger: a validation record, then trained steps 1.. with the given peaks."""
    records: list[dict[str, Any]] = [{"step": 0, "data": {"val-core/x": 0.0}}]
    for step, gib in enumerate(peaks, start=1):
        data = {"actor/entropy": 0.5, "critic/score/mean": 0.25}
        if gib is not None:
            data[rehearsal_peak.METRIC] = gib
        records.append({"step": step, "data": data})
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_counter_view_is_the_planners_parts(tmp_path: Path) -> None:
    """Floor: vLLM's share less the planner's non-KV allowance, plus the actor's fp32 params and
    AdamW (0.49B x 12 bytes); ceiling: the same vLLM bytes plus the update's torch-counted parts
    (the planner's update phase less the CUDA context allowance)."""
    from rlvr.planning import memory_model as mm
    from rlvr.planning.memory_plan import plan

    config, machine, view = _setup(tmp_path)
    assert view.vllm_pool == int(0.5 * 79.6 * GIB) - mm.VLLM_NON_KV_BYTES
    assert view.resident == 494032768 * 12
    planned = plan(config, machine)
    assert planned is not None
    update = planned.phases[2]
    assert view.worst_phase == "actor update"
    assert view.worst == update.bytes - mm.GPU_RUNTIME_BYTES
    # vLLM's sleeping bytes put torch's count above the planner's physical peak (the rollout)
    assert view.ceiling > 1.2 * view.physical_peak
    # the figures docs/TRAINING.md ("First run on your GPU node") quotes
    shown = [round(v / GIB, 1) for v in (view.floor, view.ceiling, view.physical_peak)]
    assert shown == [43.3, 65.0, 47.8]


def test_peak_memory_within_the_bounds(tmp_path: Path) -> None:
    config, machine, view = _setup(tmp_path)
    for gib in (view.floor / GIB, view.ceiling / GIB, 1.09 * view.ceiling / GIB):
        metrics = _metrics(tmp_path / "m.jsonl", [gib - 1, gib, gib])
        line = rehearsal_peak.peak_memory(metrics, config, machine)
        assert f"measured {gib:.1f} GiB" in line and "max of steps [1, 2, 3]" in line


def test_peak_memory_over_the_ceiling_fails_naming_both(tmp_path: Path) -> None:
    """Negative control: a run 15% over the planned ceiling (the planner under-estimated)."""
    config, machine, view = _setup(tmp_path)
    over = 1.15 * view.ceiling / GIB
    metrics = _metrics(tmp_path / "m.jsonl", [over, over, over])
    expected = f"measured {over:.1f} GiB .* planned {view.floor / GIB:.1f}-{view.ceiling / GIB:.1f}"
    with pytest.raises(RehearsalFailure, match=expected + ".*planner under-estimates"):
        rehearsal_peak.peak_memory(metrics, config, machine)


def test_peak_memory_under_the_floor_fails(tmp_path: Path) -> None:
    """Negative control: a peak without vLLM's share (the actor alone): not what was planned."""
    config, machine, view = _setup(tmp_path)
    alone = (view.worst + 1.5 * GIB) / GIB
    metrics = _metrics(tmp_path / "m.jsonl", [alone, alone, alone])
    with pytest.raises(RehearsalFailure, match=re.escape("under 0.90 x the planned floor")):
        rehearsal_peak.peak_memory(metrics, config, machine)


def test_peak_memory_missing_fails_not_passes(tmp_path: Path) -> None:
    config, machine, view = _setup(tmp_path)
    good = view.ceiling / GIB
    metrics = _metrics(tmp_path / "m.jsonl", [good, None, good])
    with pytest.raises(RehearsalFailure, match=re.escape("missing at steps [2]")):
        rehearsal_peak.peak_memory(metrics, config, machine)
    with pytest.raises(RehearsalFailure, match="no trained step"):
        rehearsal_peak.peak_memory(_metrics(tmp_path / "none.jsonl", []), config, machine)
    with pytest.raises(RehearsalFailure, match="file logger wrote nothing"):
        rehearsal_peak.peak_memory(tmp_path / "absent.jsonl", config, machine)


def _wandb_run(root: Path, name: str) -> Path:
    """An offline wandb run as the ``wandb`` check reads it: a run file and the val table."""
    run = root / f"logs/wandb/offline-run-{name}/run-{name}.wandb"
    table = run.parent / "files/media/table/val/generations_2_abc.table.json"
    table.parent.mkdir(parents=True)
    run.write_bytes(b"w")
    table.write_text("{}")
    return run


@pytest.mark.parametrize(
    ("log", "again", "expected"),
    [
        ("Load from checkpoint folder .../global_step_2/actor", False, None),
        # negative controls: a relaunch that started over, or trained steps 1-3 again
        ("Training from scratch", False, "did not load global_step_2"),
        ("Load from checkpoint folder .../global_step_2/actor", True, r"trained steps \[1, 2, 3\]"),
    ],
)
def test_resumed_needs_the_load_and_step_three_alone(
    tmp_path: Path, log: str, again: bool, expected: str | None
) -> None:
    """Shared by both modes (rlvr/rehearsal/steps.py ``resumed``)."""
    from rlvr.rehearsal.plan import make_plan
    from rlvr.rehearsal.steps import resumed

    plan = make_plan("countdown_qwen3_4b", tmp_path, 8)
    metrics = tmp_path / "metrics.jsonl"
    trained = {"actor/entropy": 0.5, "critic/score/mean": 0.25}
    first = [{"step": s, "data": trained} for s in (1, 2)]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in first))
    known = {_wandb_run(tmp_path, "1")}, metrics.stat().st_size
    steps = (1, 2, 3) if again else (3,)
    with open(metrics, "a") as handle:
        handle.writelines(json.dumps({"step": s, "data": trained}) + "\n" for s in steps)
    _wandb_run(tmp_path, "2")
    (tmp_path / "resume.log").write_text(log + "\n")
    if expected is None:
        assert "from global_step_2; metrics.jsonl: steps [3]" in resumed(plan, metrics, known)
    else:
        with pytest.raises(RehearsalFailure, match=expected):
            resumed(plan, metrics, known)


def test_cleanup_row_fails_on_processes_left() -> None:
    from rlvr.rehearsal.steps import cleanup_row

    assert cleanup_row([], 0) == ("cleanup", "ok", "Ray processes left: 0")
    assert cleanup_row([42], 0)[:2] == ("cleanup", "FAIL")  # negative control

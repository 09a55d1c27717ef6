"""Sweep engine: grid parsing and naming, per-step metrics from verl's JSON lines (recorded
files), collapse detection, and the CLIs. The runner's skip/keep-going rules (with a
stand-in launcher) are in tests/test_sweep_runner.py, tables and figures in
tests/test_sweep_report.py.

The real 2x2 GRPO sweep on CPU is in tests/test_sweep_e2e.py.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from rlvr.report.metrics_log import StepRecord, parse_steps, read_steps
from rlvr.sweep.folder import load_sweep
from rlvr.sweep.grid import SweepError, SweepSpec, grid_points, parse_grid
from rlvr.sweep.history import summarise_history
from rlvr.sweep.runner import RAY_CLI, failure_reason, launch_command, point_overrides

ROOT = Path(__file__).resolve().parents[1]


def test_grid_aliases_order_and_names() -> None:
    axes = parse_grid(["lora_rank=8,32", "actor_rollout_ref.actor.optim.lr=1e-6, 5e-4"])
    assert [a.key for a in axes] == [
        "actor_rollout_ref.model.lora_rank",
        "actor_rollout_ref.actor.optim.lr",
    ]
    points = grid_points(axes)
    assert [p.name for p in points] == [
        "lora_rank8_lr1e-6",
        "lora_rank8_lr5e-4",
        "lora_rank32_lr1e-6",
        "lora_rank32_lr5e-4",
    ]
    assert points[1].overrides == (
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.actor.optim.lr=5e-4",
    )
    assert parse_grid(["lr=1e-5"])[0].key == "actor_rollout_ref.actor.optim.lr"


@pytest.mark.parametrize(
    "specs, message",
    [
        ([], "no --grid"),
        (["lr"], "KEY=V1,V2"),
        (["lr="], "KEY=V1,V2"),
        (["=1,2"], "KEY=V1,V2"),
        (["lr=1e-5,1e-5"], "repeated"),
        (["lr=1", "actor_rollout_ref.actor.optim.lr=2"], "already on the grid"),
        (["a.b.n=1", "c.n=2"], "different names"),
        (["lr;rm=1"], "not a config key"),
        # a value lost to a stray comma is refused, not silently one run fewer
        (["lr=1e-5,,1e-4"], "an empty value"),
        (["lr=1e-5,"], "an empty value"),
        (["lr=,1e-5"], "an empty value"),
        # no learning rate or coefficient is infinite
        (["lr=inf"], "inf is not a finite number"),
        (["lr=1e-5,-inf"], "-inf is not a finite number"),
        (["kl_coef=nan"], "nan is not a finite number"),
        (["lr=1e999"], "1e999 is not a finite number"),
        # true/1 and false/0 are one value (see value_key): two identical runs
        (["trainer.val_before_train=true,1"], r"repeated values \(true, 1 are one value\)"),
        (["trainer.val_before_train=False,0.0"], "repeated values"),
    ],
)
def test_bad_grids_are_refused(specs: list[str], message: str) -> None:
    with pytest.raises(SweepError, match=message):
        parse_grid(specs)


def test_values_that_would_share_a_run_folder_are_refused() -> None:
    with pytest.raises(SweepError, match="same run name: train_filesab"):
        grid_points(parse_grid(["data.train_files=a/b,ab"]))


def test_point_overrides_name_group_and_checkpoints(tmp_path: Path) -> None:
    spec = SweepSpec("demo", "countdown_cpu", parse_grid(["lr=1e-5", "rollout_n=2"]), ["x=1"])
    point = grid_points(spec.grid)[0]
    overrides = point_overrides(spec, point, tmp_path)
    assert overrides[:3] == [
        "x=1",
        "actor_rollout_ref.actor.optim.lr=1e-5",
        "actor_rollout_ref.rollout.n=2",
    ]
    assert "trainer.experiment_name=demo__lr1e-5_rollout_n2" in overrides
    assert f"trainer.default_local_dir={tmp_path / 'checkpoints'}" in overrides
    assert f"paths.metrics={tmp_path / 'metrics.jsonl'}" in overrides
    assert f"paths.rollouts={tmp_path / 'rollouts'}" in overrides  # where the report looks
    assert {"+sweep.name=demo", "+sweep.lr=1e-5", "+sweep.rollout_n=2"} <= set(overrides)
    assert "trainer.save_freq=-1" in overrides
    spec.keep_checkpoints = True
    assert "trainer.save_freq=-1" not in point_overrides(spec, point, tmp_path)

    job = launch_command(spec, point, tmp_path, ray_address="http://head:8265")
    assert job[:4] == [RAY_CLI, "job", "submit", "--address=http://head:8265"]
    assert Path(RAY_CLI).is_file() and Path(RAY_CLI).parent == Path(sys.executable).parent
    env_flag = next(a for a in job if a.startswith("--runtime-env-json="))
    runtime_env = json.loads(env_flag.split("=", 1)[1])
    assert runtime_env["env_vars"] == {"RLVR_LOG_DIR": str(tmp_path), "WANDB_RUN_GROUP": "demo"}
    assert job[job.index("--") + 1 :] == launch_command(spec, point, tmp_path)


def test_objective_preset_is_a_grid_axis(tmp_path: Path) -> None:
    """``--grid objective=grpo,dapo``: a Hydra group override reaches the launcher as written,
    every point composes (verl's checks included), and run names stay plain folder names."""
    from rlvr.config.compose import objectives
    from rlvr.sweep.runner import checked_points

    spec = SweepSpec("obj", "countdown_cpu", parse_grid([f"objective={','.join(objectives())}"]))
    points = checked_points(spec)
    assert [p.overrides for p in points] == [(f"objective={o}",) for o in objectives()]
    names = [p.name for p in points]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.+-]*", name) for name in names), names
    dapo = next(p for p in points if p.values["objective"] == "dapo")
    overrides = point_overrides(spec, dapo, tmp_path)
    assert "objective=dapo" in overrides and "+sweep.objective=dapo" in overrides
    command = launch_command(spec, dapo, tmp_path)
    assert command[2:4] == ["countdown_cpu", "objective=dapo"]
    # with another axis: the group override and the key override both pass through
    mixed = SweepSpec("m", "countdown_cpu", parse_grid(["objective=dapo,tuft_is", "lr=1e-5"]))
    assert [p.overrides for p in checked_points(mixed)] == [
        ("objective=dapo", "actor_rollout_ref.actor.optim.lr=1e-5"),
        ("objective=tuft_is", "actor_rollout_ref.actor.optim.lr=1e-5"),
    ]
    with pytest.raises(SweepError, match="objective=nope"):
        checked_points(SweepSpec("bad", "countdown_cpu", parse_grid(["objective=grpo,nope"])))


# Recorded from a real `countdown_cpu` run with `trainer.logger=[console,wandb,file]` (verl
# 0.6.1's FileLogger with the hook's fix): lines as verl writes them, steps 1 and 2 abridged
# and step 2's reward and validation raised from 0 so the summary has something to find.
# global_seqlen/* were 0-d torch tensors in verl (the values that crash the unpatched logger).
VERL_LINES = (
    '{"step": 0, "data": {"val-aux/countdown/reward/mean@1": 0.0, '
    '"val-aux/countdown/score/mean@1": 0.0, "val-aux/countdown/format/mean@1": 0.0, '
    '"val-aux/countdown/valid/mean@1": 0.0, "val-aux/countdown/correct/mean@1": 0.0, '
    '"val-core/countdown/acc/mean@1": 0.0, '
    '"val-aux/countdown/bad_ground_truth/mean@1": 0.0}}\n'
    '{"step": 1, "data": {"global_seqlen/min": 20520328, "global_seqlen/mean": 20520328.0, '
    '"actor/entropy": 6.38855504989624, "actor/pg_loss": 0.0, '
    '"actor/grad_norm": 0.0003333135973662138, "actor/lr": 0.0001, '
    '"training/global_step": 1, "critic/score/mean": 0.0, "response_length/mean": 48.0, '
    '"timing_s/gen": 1.0140001599993411}}\n'
    '{"step": 2, "data": {"global_seqlen/min": 20520328, "actor/entropy": 6.3890061378479, '
    '"actor/kl_loss": 3.5597322494140826e-05, "actor/grad_norm": 0.0002934121584985405, '
    '"val-core/countdown/acc/mean@1": 0.25, "training/global_step": 2, '
    '"critic/score/mean": 0.125}}\n'
)


def test_verl_json_lines_are_read_as_typed_step_records() -> None:
    records = parse_steps(VERL_LINES)
    assert [r.step for r in records] == [0, 1, 2]
    assert all(isinstance(r, StepRecord) for r in records)
    assert records[0].metrics["val-core/countdown/acc/mean@1"] == 0.0
    one = records[1].metrics
    assert one["global_seqlen/min"] == 20520328.0 and isinstance(one["global_seqlen/min"], float)
    assert one["actor/grad_norm"] == pytest.approx(3.333e-4, rel=1e-3)
    summary = summarise_history(records)
    assert summary.steps == 2 and summary.rewards == [(1, 0.0), (2, 0.125)]
    assert summary.initial_val == 0.0 and summary.best_val == 0.25


def test_json_lines_edge_cases(tmp_path: Path) -> None:
    """NaN as Python's json writes it, a step logged twice (a resume validates its start step
    again), non-numbers, a last line cut short; a bad line elsewhere is an error."""
    text = (
        '{"step": 1, "data": {"critic/score/mean": 0.25, "actor/pg_loss": -0.1, "note": "x"}}\n'
        '{"step": 2, "data": {"critic/score/mean": 0.5, "actor/grad_norm": NaN, "ok": true}}\n'
        '{"step": 2, "data": {"val-core/countdown/acc/mean@1": 0.75, "actor/entropy": Infinity}}\n'
        '{"step": 3, "data": {"critic/sco'
    )
    (path := tmp_path / "metrics.jsonl").write_text(text)
    records = read_steps(path)
    assert [r.step for r in records] == [1, 2]
    assert records[0].metrics == {"critic/score/mean": 0.25, "actor/pg_loss": -0.1}
    two = records[1].metrics
    assert math.isnan(two["actor/grad_norm"]) and two["actor/entropy"] == math.inf
    assert two["critic/score/mean"] == 0.5 and two["val-core/countdown/acc/mean@1"] == 0.75
    assert "ok" not in two
    assert read_steps(tmp_path / "absent.jsonl") == []
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a step record"):
        path.write_text('{"step": 1, "data": {}}\nstep:2 - a:1\n{"step": 3, "data": {}}\n')
        read_steps(path)
    with pytest.raises(ValueError, match="not an integer"):
        parse_steps('{"step": "one", "data": {}}\n')


def _history(rewards: list[float], at: dict[int, dict[str, float]] | None = None) -> list:
    steps = {step: {"critic/score/mean": r} for step, r in enumerate(rewards, start=1)}
    for step, metrics in (at or {}).items():
        steps.setdefault(step, {}).update(metrics)
    return [StepRecord(step, metrics) for step, metrics in sorted(steps.items())]


def test_final_reward_is_the_mean_of_the_last_steps() -> None:
    summary = summarise_history(_history([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]), last_k=5)
    assert summary.final_reward == pytest.approx(0.4)
    assert summary.peak_reward == pytest.approx(0.55)  # 2-step average (7 // 3)
    assert summary.steps == 7 and not summary.collapsed
    short = summarise_history(_history([0.2, 0.4]), last_k=5)  # fewer steps than K
    assert short.final_reward == pytest.approx(0.3)


def test_collapse_after_a_peak_and_on_nan() -> None:
    rise_and_fall = [0.1, 0.5, 0.8, 0.8, 0.8, 0.8, 0.8, 0.1, 0.0, 0.0, 0.0, 0.0]
    summary = summarise_history(_history(rise_and_fall), last_k=5)
    assert summary.collapsed and "fell from 0.800" in summary.collapse_reason
    # a dip that stays above half the peak is not a collapse
    assert not summarise_history(_history([0.5] * 6 + [0.3] * 5), last_k=5).collapsed
    # near-zero reward noise is not a peak
    assert not summarise_history(_history([0.0, 0.04, 0.0, 0.0, 0.0, 0.0]), last_k=2).collapsed
    nan = summarise_history(_history([0.2, 0.3, 0.1], at={3: {"actor/pg_loss": float("nan")}}))
    assert nan.collapsed and nan.final_reward is None
    assert nan.collapse_reason == "actor/pg_loss is nan at step 3"


def test_best_validation_ignores_the_step_zero_baseline() -> None:
    history = _history([0.1, 0.2], at={2: {"val-core/countdown/acc/mean@1": 0.3}})
    history.insert(0, StepRecord(0, {"val-core/countdown/acc/mean@1": 0.9}))
    summary = summarise_history(history)
    assert summary.best_val == 0.3 and summary.initial_val == 0.9


def test_failure_reason_names_the_error() -> None:
    output = "starting\nTraceback (most recent call last):\n  File x\nValueError: lr must be > 0\n"
    assert failure_reason(1, output) == "exit 1: ValueError: lr must be > 0"
    assert failure_reason(None, output) == "timed out"
    assert failure_reason(3, "") == "exit 3: no output"


def test_cli_checks_every_point_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    spec = importlib.util.spec_from_file_location("sweep_cli", ROOT / "scripts/sweep.py")
    assert spec is not None and spec.loader is not None
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)

    def sweep(*args: str) -> tuple[int, str, str]:
        try:
            code = cli.main([f"--out={tmp_path}", *args])
        except SystemExit as exit_:  # argparse
            code = int(exit_.code or 0)
        out = capsys.readouterr()
        return code, out.out, out.err

    code, _, err = sweep("--experiment=countdown_cpu", "--grid=actor_rollout_ref.actor.optim.lrr=1")
    assert code == 2 and "point lrr1 is not a valid config" in err
    # verl's own check: the mini batch must not exceed the train batch
    code, _, err = sweep(
        "--experiment=countdown_cpu",
        "--grid=data.train_batch_size=2,1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",  # the recipe's follows the batch
        "actor_rollout_ref.actor.use_dynamic_bsz=false",  # verl checks batches only without it
        "--dry_run",  # a check that passed by mistake must not launch anything
    )
    assert code == 2 and "train_batch_size1" in err
    assert sweep("--grid=lr=1")[0] == 2  # --experiment is required
    code, out, _ = sweep("--experiment=countdown_cpu", "--grid=lr=1e-5,1e-4", "--dry_run")
    assert code == 0 and "lr1e-4: actor_rollout_ref.actor.optim.lr=1e-4" in out
    assert not list(tmp_path.iterdir())  # a dry run writes nothing


@pytest.mark.parametrize(
    "spec, repeated",
    [
        ("lr=1e-5,1e-05,0.00001", "1e-5, 1e-05, 0.00001"),
        ("lora_rank=8,8.0,32", "8, 8.0"),
        ("actor_rollout_ref.actor.use_kl_loss=True,true", "True, true"),
        ("lr=1e-5,1e-5", "1e-5, 1e-5"),
    ],
)
def test_grid_values_are_compared_as_values(spec: str, repeated: str) -> None:
    with pytest.raises(SweepError, match=f"repeated values \\({repeated} are one value\\)"):
        parse_grid([spec])


def test_distinct_values_and_text_stay_apart() -> None:
    """Controls: different numbers, and strings that only look alike, are separate points."""
    assert len(grid_points(parse_grid(["lr=1e-5,1e-4", "data.tag=a,A"]))) == 4
    assert len(grid_points(parse_grid(["trainer.val_before_train=true,false"]))) == 2
    assert parse_grid(["data.tag=info, nano"])[0].values == ("info", "nano")  # text, not inf/nan


def test_a_rerun_spelling_a_value_differently_reuses_its_point(tmp_path: Path) -> None:
    from rlvr.sweep.folder import prepare_sweep_dir

    first = SweepSpec("s", "countdown_cpu", parse_grid(["lr=1e-5"]))
    assert prepare_sweep_dir(first, tmp_path) == first
    again = prepare_sweep_dir(
        SweepSpec("s", "countdown_cpu", parse_grid(["lr=1e-05,2e-5"])), tmp_path
    )
    assert [p.name for p in grid_points(again.grid)] == ["lr1e-5", "lr2e-5"]
    assert json.loads((tmp_path / "sweep.json").read_text())["grid"] == {"lr": ["1e-5", "2e-5"]}


def test_a_corrupt_sweep_record_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text("{not json")
    with pytest.raises(SweepError, match="not a readable sweep record"):
        load_sweep(tmp_path)
    (tmp_path / "sweep.json").write_text('{"grid": {"lr": ["1"]}}')  # no grid_keys
    with pytest.raises(SweepError, match="not a readable sweep record"):
        load_sweep(tmp_path)


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"{name}_cli", ROOT / f"scripts/{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "args, message",
    [
        (["--experiment=countdown_cpu", "--grid=lr=1", "--name=../escape"], "--name '../escape'"),
        (["--experiment=countdown_cpu", "--grid=lr=1", "--timeout_h=0"], "--timeout_h 0.0"),
        (["--experiment=countdown_cpuu", "--grid=lr=1"], "did you mean countdown_cpu?"),
        (["--experiment=countdown_cpu", "--grid=rollout_n=2,0"], "rollout.n=0: must be"),
        (["--experiment=countdown_cpu", "--grid=lr=1e-5,1e-05"], "are one value"),
        (["--experiment=countdown_cpu", "--grid=lr=1e-5,,1e-4"], "an empty value"),
        (["--experiment=countdown_cpu", "--grid=lr=inf"], "inf is not a finite number"),
    ],
)
def test_sweep_cli_refuses_with_one_line(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert _script("sweep").main([f"--out={tmp_path}", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not list(tmp_path.iterdir())  # nothing written

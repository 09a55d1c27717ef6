"""The objective comparison's analysis (benchmarks/objective_comparison.py) on constructed run
folders: verl's validation dumps and metrics.jsonl as the sweep leaves them, no training."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from rlvr.report.metrics_log import StepRecord
from rlvr.sweep.folder import STATUS_FILE, RunStatus, run_dir
from rlvr.sweep.grid import grid_points

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str) -> Any:
    """benchmarks/NAME.py: benchmarks/ is scripts, not a package, so load the module by path,
    registered so that its dataclasses resolve their own module (and compare_objectives finds
    objective_comparison)."""
    found = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    found.loader.exec_module(module)
    return module


compare = _script("objective_comparison")
bench = _script("compare_objectives")

SCORES_BEFORE = {"p1": [0.0, 0.0, 1.0, 1.0], "p2": [0.0, 0.0, 0.0, 0.0], "p3": [1.0, 1.0, 1.0, 0.0]}
SCORES_AFTER = {"p1": [1.0, 1.0, 1.0, 1.0], "p2": [0.0, 0.0, 0.0, 1.0], "p3": [1.0, 1.0, 1.0, 1.0]}


def _dump(path: Path, scores: dict[str, list[float]], step: int) -> None:
    """verl's _dump_generations lines: one per sample, the prompt as ``input``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"input": prompt, "output": "x", "gts": None, "score": s, "step": step})
        for prompt, samples in scores.items()
        for s in samples
    ]
    path.write_text("\n".join(lines) + "\n")


def _run(folder: Path, curve: list[float], after: dict[str, list[float]], state: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "metrics.jsonl").open("w") as f:
        for step, value in enumerate(curve, start=1):
            f.write(json.dumps({"step": step, "data": {"critic/score/mean": value}}) + "\n")
    validation = folder / "checkpoints" / compare.VALIDATION_DIR
    _dump(validation / "0.jsonl", SCORES_BEFORE, 0)
    _dump(validation / f"{len(curve)}.jsonl", after, len(curve))
    RunStatus("p", {}, state, 0 if state == "finished" else 1, "", 300.0, []).save(
        folder / STATUS_FILE
    )


def test_prompt_means_group_samples_by_input(tmp_path: Path) -> None:
    _dump(tmp_path / "0.jsonl", SCORES_BEFORE, 0)
    assert compare.prompt_means(tmp_path / "0.jsonl") == {"p1": 0.5, "p2": 0.0, "p3": 0.75}


def test_steps_to_half_gain() -> None:
    def records(values: list[float]) -> list[StepRecord]:
        return [StepRecord(i + 1, {"critic/score/mean": v}) for i, v in enumerate(values)]

    assert compare.steps_to_half_gain(records([0.1, 0.2, 0.4, 0.5])) == 3  # half: 0.3
    assert compare.steps_to_half_gain(records([0.1, 0.35, 0.2, 0.5])) == 2  # first to reach it
    assert compare.steps_to_half_gain(records([0.5, 0.4])) is None  # no gain
    assert compare.steps_to_half_gain(records([0.5])) is None


def test_runs_presets_table_and_figure(tmp_path: Path) -> None:
    spec = compare.comparison_spec("t", "countdown_smollm2_cpu", ["grpo", "dapo"], [1, 2], [])
    sweep = tmp_path / "sweep"
    points = {p.name: p for p in grid_points(spec.grid)}
    _run(
        run_dir(sweep, points["objectivegrpo_seed1"]),
        [0.1, 0.2, 0.4, 0.5],
        SCORES_AFTER,
        "finished",
    )
    _run(
        run_dir(sweep, points["objectivegrpo_seed2"]),
        [0.2, 0.1, 0.1, 0.1],
        SCORES_BEFORE,
        "finished",
    )
    _run(run_dir(sweep, points["objectivedapo_seed1"]), [0.1, 0.2], SCORES_AFTER, "failed")

    results, missing = compare.read_runs(spec, sweep)
    assert missing == ["objectivedapo_seed1", "objectivedapo_seed2"]
    failed = next(r for r in results if r.preset == "dapo")
    assert not failed.complete and failed.curve == [(1, 0.1), (2, 0.2)] and failed.after is None
    run = next(r for r in results if r.seed == 1 and r.preset == "grpo")
    assert run.last_step == 4 and run.half_gain_step == 3 and run.seconds == 300.0
    # per-prompt deltas 0.5, 0.25, 0.25: mean 1/3, sd sqrt(1/48), t(0.975, 2) = 4.3027
    delta = run.delta()
    half = 4.302653 * math.sqrt(1 / 48) / math.sqrt(3)
    assert delta.mean == pytest.approx(1 / 3)
    assert (delta.low, delta.high) == pytest.approx((1 / 3 - half, 1 / 3 + half), abs=1e-4)
    assert run.final().mean == pytest.approx((1 + 0.25 + 1) / 3)

    grpo, dapo = compare.by_preset(results, ["grpo", "dapo"])
    assert dapo.complete == []
    assert [r.seed for r in grpo.runs] == [1, 2]
    # seed 2 did not move: pooled per prompt, the delta halves and stays paired over prompts
    assert grpo.delta().mean == pytest.approx(1 / 6) and grpo.delta().n == 3
    assert grpo.before() == pytest.approx((0.5 + 0 + 0.75) / 3)

    table = compare.markdown_table([grpo, dapo])
    assert "| **grpo** | 1, 2 |" in table and "| 3, - |" in table
    assert "**dapo**" not in table and "| dapo | 1 | - | failed, 2 step(s) logged" in table
    assert table.count("\n") == 6  # header, rule, preset row, three run rows
    figure = compare.plot_curves([grpo, dapo], tmp_path / "f.png", "t")
    assert figure.stat().st_size > 1000


def test_no_run_starts_after_the_deadline(tmp_path: Path) -> None:
    spec = compare.comparison_spec("t", "countdown_smollm2_cpu", ["grpo"], [1, 2], [])
    lines: list[str] = []
    statuses = compare.run_points(spec, tmp_path, 60, deadline=0.0, echo=lines.append)
    assert statuses == [] and len(lines) == 2 and not (tmp_path / "runs").exists()


def test_seed_major_order() -> None:
    spec = compare.comparison_spec("t", "x", ["grpo", "dapo"], [1, 2], [])
    names = [p.name for p in compare.seed_major(grid_points(spec.grid))]
    assert names == [
        "objectivegrpo_seed1",
        "objectivedapo_seed1",
        "objectivegrpo_seed2",
        "objectivedapo_seed2",
    ]


def test_validation_dumps_follow_each_point() -> None:
    overrides = compare.validation_overrides(4, 0.7, 32)
    assert "actor_rollout_ref.rollout.val_kwargs.do_sample=true" in overrides
    assert "trainer.validation_data_dir=${trainer.default_local_dir}/validation" in overrides


def test_dapo_points_get_a_buffer_that_fits_the_cpu_budget() -> None:
    """objective/dapo.yaml's buffer is for 1024 tokens; the benchmark's dapo points carry their
    own, which pre-flight's check accepts, and the other presets carry none (the naive reward
    manager would refuse the key). Negative control: a dapo point without it is refused."""
    from rlvr.config.compose import compose
    from rlvr.preflight.checks import _overlong_buffer_problems

    spec = compare.comparison_spec("t", bench.EXPERIMENT, ["grpo", "dapo"], [1], [])
    grpo, dapo = compare.point_specs(spec, bench.PRESET_OVERRIDES)
    assert not any("overlong" in o for o in grpo.overrides)
    fitted = compose(bench.EXPERIMENT, ["objective=dapo", *dapo.overrides])
    assert _overlong_buffer_problems(fitted) == []
    assert _overlong_buffer_problems(compose(bench.EXPERIMENT, ["objective=dapo"])) != []


def test_the_default_comparison_covers_every_preset() -> None:
    """Every objective preset is compared by default, and each default point passes the checks
    the benchmark runs before any run (composition, pre-flight's numbers, verl's own)."""
    from rlvr.config.compose import objectives
    from rlvr.sweep.runner import checked_points

    presets = bench.PRESETS.split(",")
    assert sorted(presets) == objectives()
    spec = compare.comparison_spec("t", bench.EXPERIMENT, presets, [1], [])
    points = [
        p for one in compare.point_specs(spec, bench.PRESET_OVERRIDES) for p in checked_points(one)
    ]
    assert [p.values[compare.OBJECTIVE_AXIS] for p in points] == presets


def test_reinforce_points_update_once_a_batch() -> None:
    """nanochat's REINFORCE (gpg, no ratio) is on policy: its points take the whole batch as one
    mini batch, where the experiment's own (the other presets') takes two."""
    from rlvr.config.batching import batching
    from rlvr.config.compose import compose

    spec = compare.comparison_spec("t", bench.EXPERIMENT, ["grpo", "reinforce_nanochat"], [1], [])
    grpo, reinforce = compare.point_specs(spec, bench.PRESET_OVERRIDES)
    on_policy = compose(bench.EXPERIMENT, ["objective=reinforce_nanochat", *reinforce.overrides])
    assert batching(on_policy).updates_per_batch == 1
    assert (
        batching(compose(bench.EXPERIMENT, ["objective=grpo", *grpo.overrides])).updates_per_batch
        == 2
    )

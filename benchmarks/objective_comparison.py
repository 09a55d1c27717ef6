"""Comparing objective presets on one recipe (benchmarks/compare_objectives.py, its one user):
runs through the sweep runner, then per-run and per-preset numbers from verl's validation dumps
and the runs' metrics.jsonl.

Per run: the sampled validation score before training (step 0) and at the last step, each a
mean over prompts of the prompt's mean over its samples (verl's ``_dump_generations`` lines,
grouped by their ``input``), the paired delta with a 95% t interval over prompts, the steps to
reach half the run's gain in ``critic/score/mean``, and the wall time. Per preset: the same with
each prompt's numbers averaged over seeds first, so the interval is still over prompts.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rlvr.evaluation.paired import Interval, paired_t_interval
from rlvr.report.metrics_log import StepRecord
from rlvr.sweep.folder import STATUS_FILE, RunStatus, load_records, run_dir
from rlvr.sweep.grid import GridAxis, GridPoint, SweepSpec, grid_points
from rlvr.sweep.history import REWARD_KEY
from rlvr.sweep.runner import run_sweep

VALIDATION_DIR = "validation"  # per run, next to metrics.jsonl (see validation_overrides)
OBJECTIVE_AXIS = "objective"
SEED_AXIS = "data.seed"


# ---------------------------------------------------------------- running


def validation_overrides(samples: int, temperature: float, prompts: int) -> list[str]:
    """Sampled validation before training and at test_freq, each sample dumped per run.

    verl 0.6.1's HF rollout uses val_kwargs (temperature, top_k, top_p) only when do_sample is
    true; val_kwargs.n repeats each prompt in the trainer. The dump folder follows the point's
    own trainer.default_local_dir (the sweep sets it per point), so one shared override serves
    every point.
    """
    return [
        f"actor_rollout_ref.rollout.val_kwargs.n={samples}",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        f"actor_rollout_ref.rollout.val_kwargs.temperature={temperature}",
        f"data.val_max_samples={prompts}",
        "trainer.val_before_train=true",
        f"trainer.validation_data_dir=${{trainer.default_local_dir}}/{VALIDATION_DIR}",
    ]


def comparison_spec(
    name: str, experiment: str, presets: Sequence[str], seeds: Sequence[int], overrides: list[str]
) -> SweepSpec:
    grid = [
        GridAxis(OBJECTIVE_AXIS, OBJECTIVE_AXIS, tuple(presets)),
        GridAxis(SEED_AXIS, SEED_AXIS, tuple(str(s) for s in seeds)),
    ]
    return SweepSpec(name=name, experiment=experiment, grid=grid, overrides=overrides)


def seed_major(points: Sequence[GridPoint]) -> list[GridPoint]:
    """Every preset's first seed before any second seed: a deadline then cuts seeds, not
    presets."""
    return sorted(points, key=lambda p: int(p.values[SEED_AXIS]))  # stable: grid order within


def point_specs(spec: SweepSpec, preset_overrides: Mapping[str, list[str]]) -> list[SweepSpec]:
    """One one-point sweep per grid point, seed-major, each with its preset's own overrides
    (``preset_overrides``, e.g. dapo's overlong buffer for a short response budget)."""
    return [
        replace(
            spec,
            grid=[replace(axis, values=(point.values[axis.name],)) for axis in spec.grid],
            overrides=[*spec.overrides, *preset_overrides.get(point.values[OBJECTIVE_AXIS], [])],
        )
        for point in seed_major(grid_points(spec.grid))
    ]


def run_points(
    spec: SweepSpec,
    sweep_dir: Path,
    timeout_s: float,
    deadline: float | None = None,
    echo: Callable[[str], None] = print,
    preset_overrides: Mapping[str, list[str]] | None = None,
) -> list[RunStatus]:
    """Each point through ``rlvr.sweep.runner.run_sweep`` as a one-point sweep in the same
    folder (a rerun skips finished points), seed-major; no point starts after ``deadline``
    (epoch seconds), since the sweep itself only bounds each point, not the whole grid."""
    statuses = []
    for one in point_specs(spec, preset_overrides or {}):
        if deadline is not None and time.time() > deadline:
            (point,) = grid_points(one.grid)
            echo(f"{point.name}: not started, past the deadline")
            continue
        statuses += run_sweep(one, sweep_dir, timeout_s=timeout_s, echo=echo)
    return statuses


# ---------------------------------------------------------------- reading a run


def prompt_means(dump: Path) -> dict[str, float]:
    """A validation dump's per-prompt mean of ``score`` (the reward function's own score: with
    the dapo reward manager the overlong penalty is in ``reward``, not here)."""
    scores: dict[str, list[float]] = {}
    for line in dump.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            scores.setdefault(entry["input"], []).append(float(entry["score"]))
    return {prompt: sum(values) / len(values) for prompt, values in scores.items()}


def validation_steps(folder: Path) -> dict[int, Path]:
    """The run's dumps by training step (verl names them ``<global_step>.jsonl``)."""
    found = {}
    for path in (folder / "checkpoints" / VALIDATION_DIR).glob("*.jsonl"):
        if path.stem.isdigit():
            found[int(path.stem)] = path
    return found


def steps_to_half_gain(records: Sequence[StepRecord], key: str = REWARD_KEY) -> int | None:
    """The first step whose ``key`` reaches the first step's value plus half of (last - first);
    None when the run did not gain."""
    curve = [(r.step, r.metrics[key]) for r in records if key in r.metrics]
    if len(curve) < 2:
        return None
    first, last = curve[0][1], curve[-1][1]
    gain = last - first
    if not math.isfinite(gain) or gain <= 0:
        return None
    return next(step for step, value in curve if value >= first + gain / 2)


@dataclass
class RunResult:
    preset: str
    seed: int
    state: str  # the sweep's: finished or failed (a failed run keeps its curve for the figure)
    before: dict[str, float] | None  # per-prompt sampled score at step 0
    after: dict[str, float] | None  # per-prompt sampled score at the last step
    last_step: int | None
    curve: list[tuple[int, float]]  # (step, critic/score/mean)
    half_gain_step: int | None
    seconds: float

    @property
    def complete(self) -> bool:
        return self.state == "finished" and self.before is not None and self.after is not None

    @property
    def prompts(self) -> list[str]:
        return sorted(set(self.before or {}) & set(self.after or {}))

    def before_mean(self) -> float | None:
        if not self.before:
            return None
        return sum(self.before.values()) / len(self.before)

    def final(self) -> Interval:
        assert self.after is not None
        return mean_interval([self.after[p] for p in self.prompts])

    def delta(self) -> Interval:
        assert self.before is not None and self.after is not None
        return paired_t_interval([self.after[p] - self.before[p] for p in self.prompts])


def mean_interval(values: Sequence[float]) -> Interval:
    """A mean with its 95% t interval (the paired interval of the values against zero)."""
    return paired_t_interval(values)


def read_run(folder: Path, preset: str, seed: int) -> RunResult | None:
    """A run's numbers: validation only when it finished with dumps before and after training;
    None when it never logged a step."""
    status = RunStatus.load(folder / STATUS_FILE)
    records = load_records(folder)
    if status is None or not records:
        return None
    dumps = validation_steps(folder)
    last = max(dumps) if dumps else None
    validated = status.state == "finished" and 0 in dumps and last is not None and last > 0
    return RunResult(
        preset=preset,
        seed=seed,
        state=status.state,
        before=prompt_means(dumps[0]) if validated else None,
        after=prompt_means(dumps[last]) if validated and last is not None else None,
        last_step=last if validated else None,
        curve=[(r.step, r.metrics[REWARD_KEY]) for r in records if REWARD_KEY in r.metrics],
        half_gain_step=steps_to_half_gain(records),
        seconds=status.seconds,
    )


def read_runs(spec: SweepSpec, sweep_dir: Path) -> tuple[list[RunResult], list[str]]:
    """Every point's result, and the names of the points without a complete one."""
    results, missing = [], []
    for point in grid_points(spec.grid):
        result = read_run(
            run_dir(sweep_dir, point), point.values[OBJECTIVE_AXIS], int(point.values[SEED_AXIS])
        )
        if result is not None:
            results.append(result)
        if result is None or not result.complete:
            missing.append(point.name)
    return results, missing


# ---------------------------------------------------------------- per preset


@dataclass
class PresetResult:
    preset: str
    runs: list[RunResult]  # every run with a curve, complete or not

    @property
    def complete(self) -> list[RunResult]:
        return [r for r in self.runs if r.complete]

    @property
    def prompts(self) -> list[str]:
        runs = self.complete
        common = set(runs[0].prompts) if runs else set()
        for run in runs[1:]:
            common &= set(run.prompts)
        return sorted(common)

    def _per_prompt(self, value: Callable[[RunResult, str], float]) -> list[float]:
        runs = self.complete
        return [sum(value(r, p) for r in runs) / len(runs) for p in self.prompts]

    def before(self) -> float:
        values = self._per_prompt(lambda r, p: r.before[p] if r.before else math.nan)
        return sum(values) / len(values)

    def final(self) -> Interval:
        return mean_interval(self._per_prompt(lambda r, p: r.after[p] if r.after else math.nan))

    def delta(self) -> Interval:
        return paired_t_interval(
            self._per_prompt(
                lambda r, p: r.after[p] - r.before[p] if r.after and r.before else math.nan
            )
        )


def by_preset(results: Sequence[RunResult], presets: Sequence[str]) -> list[PresetResult]:
    groups = [
        PresetResult(p, sorted((r for r in results if r.preset == p), key=_seed)) for p in presets
    ]
    return [g for g in groups if g.runs]


def _seed(run: RunResult) -> int:
    return run.seed


# ---------------------------------------------------------------- table and figure


def _interval(i: Interval) -> str:
    return f"{i.mean:+.3f} [{i.low:+.3f}, {i.high:+.3f}]"


def _score(i: Interval) -> str:
    return f"{i.mean:.3f} [{i.low:.3f}, {i.high:.3f}]"


def _steps(values: Sequence[int | None]) -> str:
    return ", ".join("-" if v is None else str(v) for v in values)


def markdown_table(groups: Sequence[PresetResult]) -> str:
    """One row per preset (its complete runs, pooled per prompt), then one per run; a run that
    did not finish shows its curve's numbers only."""
    header = (
        "| preset | seeds | sampled score, step 0 | final sampled score [95% CI] | "
        "delta [95% CI, paired over prompts] | steps to half gain | wall time (s) |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for g in groups:
        runs = g.complete
        if not runs:
            continue
        rows.append(
            f"| **{g.preset}** | {', '.join(str(r.seed) for r in runs)} | {g.before():.3f} | "
            f"{_score(g.final())} | {_interval(g.delta())} | "
            f"{_steps([r.half_gain_step for r in runs])} | "
            f"{', '.join(f'{r.seconds:.0f}' for r in runs)} |"
        )
    for g in groups:
        for r in g.runs:
            if r.complete:
                cells = f"{r.before_mean():.3f} | {_score(r.final())} | {_interval(r.delta())}"
            else:
                cells = f"- | {r.state}, {len(r.curve)} step(s) logged, no final validation | -"
            rows.append(
                f"| {r.preset} | {r.seed} | {cells} | {_steps([r.half_gain_step])} | "
                f"{r.seconds:.0f} |"
            )
    return header + "\n".join(rows) + "\n"


def plot_curves(
    groups: Sequence[PresetResult], path: Path, title: str, notes: dict[str, str] | None = None
) -> Path:
    """critic/score/mean per step: one colour per preset, one line style per seed; ``notes``
    adds a word to a preset's legend entries."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    styles = ["-", "--", ":", "-."]
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    seeds = sorted({r.seed for g in groups for r in g.runs})
    for number, g in enumerate(groups):
        for r in g.runs:
            steps = [s for s, _ in r.curve]
            ax.plot(
                steps,
                [v for _, v in r.curve],
                linestyle=styles[seeds.index(r.seed) % len(styles)],
                marker="o",
                markersize=3,
                color=colours(number),
                alpha=1.0 if r.complete else 0.5,  # a run cut short: its curve, faded
                label=f"{g.preset} (seed {r.seed}{'' if r.complete else ', ' + r.state}"
                + (f"; {notes[g.preset]})" if notes and g.preset in notes else ")"),
            )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step")
    ax.set_ylabel(f"{REWARD_KEY} (training rollouts)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path

"""A training run's reward curve: ``critic/score/mean`` per step, and the reward's rates.

Read from the run's per-step JSON lines (``metrics.jsonl``, through ``metrics_log.read_steps``).
verl 0.6.1 logs the reward's extra keys (``format``, ``valid``, ``acc``...) only for validation
(``val-aux/<source>/<key>/mean@N``, ``val-core/<source>/acc/mean@N``, at step 0 and every
``test_freq``), not for training steps; the figure draws each such rate at the steps that have
it. matplotlib with the Agg backend, so it works on headless machines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.report.metrics_log import StepRecord, read_steps

REWARD_KEY = "critic/score/mean"
REWARD_RANGE_KEYS = ("critic/score/min", "critic/score/max")
#: Validation rates of the reward's extra keys: val-aux/<source>/<part>/mean@N (or val-core).
RATE_KEY = re.compile(r"^val-(?:core|aux)/(?P<source>[^/]+)/(?P<part>format|valid|acc)/mean@\d+$")


@dataclass(frozen=True)
class Series:
    """One line of the figure: a label and its (step, value) points, in step order."""

    label: str
    points: tuple[tuple[int, float], ...]

    @property
    def steps(self) -> list[int]:
        return [step for step, _ in self.points]

    @property
    def values(self) -> list[float]:
        return [value for _, value in self.points]


def metric_series(steps: Sequence[StepRecord], key: str, label: str | None = None) -> Series:
    """``key`` at every step that logged a finite value of it."""
    points = tuple(
        (record.step, record.metrics[key])
        for record in steps
        if key in record.metrics and math.isfinite(record.metrics[key])
    )
    return Series(label or key, points)


def moving_average(series: Series, window: int) -> Series:
    """The trailing mean over up to ``window`` points (fewer at the start)."""
    values = series.values
    points = []
    for i, step in enumerate(series.steps):
        recent = values[max(0, i - window + 1) : i + 1]
        points.append((step, sum(recent) / len(recent)))
    return Series(f"{series.label} ({window}-step mean)", tuple(points))


@dataclass(frozen=True)
class Quarters:
    """A series' first and last quarter means: whether the training reward rose over a run."""

    first: float
    last: float
    steps: int  # points in each quarter

    @property
    def rise(self) -> float:
        return self.last - self.first

    def to_json(self) -> dict[str, float | int]:
        return {"first_quarter": self.first, "last_quarter": self.last, "rise": self.rise,
                "steps_per_quarter": self.steps}  # fmt: skip


def quarter_means(series: Series) -> Quarters | None:
    """The mean of the first and of the last quarter of the points (``len // 4`` each); None
    under 4 points."""
    count = len(series.points) // 4
    if count == 0:
        return None
    values = series.values
    return Quarters(sum(values[:count]) / count, sum(values[-count:]) / count, count)


def rate_series(steps: Sequence[StepRecord]) -> list[Series]:
    """Each validation rate (format, valid, acc) that the run logged, labelled by its part."""
    keys = sorted({key for record in steps for key in record.metrics if RATE_KEY.match(key)})
    keys.sort(key=lambda key: ("format", "valid", "acc").index(_part(key)))
    return [metric_series(steps, key, f"validation {_part(key)} rate (greedy)") for key in keys]


def _part(key: str) -> str:
    match = RATE_KEY.match(key)
    return match["part"] if match else ""


@dataclass(frozen=True)
class CurveData:
    """What the reward-curve figure draws."""

    reward: Series
    low: Series
    high: Series
    rates: list[Series]

    @classmethod
    def read(cls, metrics_path: Path) -> CurveData:
        """From a run's ``metrics.jsonl``."""
        return cls.of(read_steps(metrics_path))

    @classmethod
    def of(cls, steps: Sequence[StepRecord]) -> CurveData:
        training = [record for record in steps if record.step > 0]  # step 0: validation only
        return cls(
            reward=metric_series(training, REWARD_KEY, f"{REWARD_KEY} (training batch)"),
            low=metric_series(training, REWARD_RANGE_KEYS[0]),
            high=metric_series(training, REWARD_RANGE_KEYS[1]),
            rates=rate_series(steps),
        )


def _draw_reward(ax: Any, data: CurveData) -> None:
    """The training reward, its batch min-max band, and a moving mean once there are enough steps.

    The y axis fits the reward (a format-credit run lives near 0.1), not the 0-1 range."""
    if data.low.points and data.low.steps == data.high.steps:
        ax.fill_between(
            data.low.steps,
            data.low.values,
            data.high.values,
            alpha=0.12,
            color="C0",
            label="batch min-max",
        )
    ax.plot(data.reward.steps, data.reward.values, marker="o", color="C0", label=data.reward.label)
    if len(data.reward.points) >= 8:
        smooth = moving_average(data.reward, max(2, len(data.reward.points) // 8))
        ax.plot(smooth.steps, smooth.values, color="C3", linewidth=2, label=smooth.label)
    top = max([*data.reward.values, *data.high.values, 0.05])
    ax.set_ylim(-0.03 * top, top * 1.15)
    ax.set_ylabel("reward")


def _draw_rates(ax: Any, rates: Sequence[Series]) -> None:
    for index, rate in enumerate(rates, start=1):
        ax.plot(
            rate.steps, rate.values, linestyle="--", marker="s", color=f"C{index}", label=rate.label
        )
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("rate")


def plot_reward_curve(
    metrics: Path | CurveData, output: Path, title: str = "", name: str = ""
) -> Path:
    """Write the reward curve of a run: its ``metrics.jsonl``, or the data already read from it
    (``name``: the run's name in the default title and the error, where no path tells it).

    Raises ValueError when the run logged no training step with a reward.
    """
    if isinstance(metrics, Path):
        name = name or metrics.parent.name
        data, where = CurveData.read(metrics), str(metrics)
    else:
        data, where = metrics, name or "the run"
    if not data.reward.points:
        raise ValueError(f"{where}: no training step logged {REWARD_KEY}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = 2 if data.rates else 1
    fig, axes = plt.subplots(panels, 1, figsize=(7, 3.2 * panels + 0.8), sharex=True, squeeze=False)
    _draw_reward(axes[0][0], data)
    if data.rates:
        _draw_rates(axes[1][0], data.rates)
    axes[0][0].set_title(title or f"reward per step: {name}")
    for (ax,) in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[-1][0].set_xlabel("training step")
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=120)
    plt.close(fig)
    return output

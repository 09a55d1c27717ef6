"""The reward curve of a training run (rlvr/report/curves.py), from its metrics.jsonl."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlvr.report.curves import (
    REWARD_KEY,
    CurveData,
    Series,
    moving_average,
    plot_reward_curve,
    quarter_means,
)
from rlvr.report.metrics_log import read_steps


def write_metrics(path: Path, rewards: list[float], validate_at: tuple[int, ...] = (0,)) -> Path:
    """verl's file-logger lines: step 0 (validation only), then one line per training step."""
    lines = []
    for step in range(len(rewards) + 1):
        data: dict[str, float] = {}
        if step > 0:
            data.update({REWARD_KEY: rewards[step - 1], "critic/score/min": 0.0})
            data.update({"critic/score/max": 1.0, "actor/pg_loss": -0.1})
        if step in validate_at:
            data["val-core/countdown/acc/mean@1"] = 0.125
            data["val-aux/countdown/format/mean@1"] = 0.5 + step / 100
            data["val-aux/countdown/valid/mean@1"] = 0.25
            data["val-aux/countdown/score/mean@1"] = 0.2  # not a rate: not drawn
        lines.append(json.dumps({"step": step, "data": data}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_curve_data_reads_the_reward_and_the_validation_rates(tmp_path: Path) -> None:
    metrics = write_metrics(tmp_path / "metrics.jsonl", [0.1, 0.2, math.nan, 0.4], (0, 4))
    data = CurveData.of(read_steps(metrics))
    assert data.reward.points == ((1, 0.1), (2, 0.2), (4, 0.4))  # NaN left out, no step 0
    assert data.high.values == [1.0, 1.0, 1.0, 1.0]
    assert [series.label for series in data.rates] == [
        "validation format rate (greedy)",
        "validation valid rate (greedy)",
        "validation acc rate (greedy)",
    ]
    assert data.rates[0].points == ((0, 0.5), (4, 0.54))


def test_moving_average_is_trailing() -> None:
    smooth = moving_average(Series("r", ((1, 0.0), (2, 1.0), (3, 2.0), (4, 3.0))), 2)
    assert smooth.points == ((1, 0.0), (2, 0.5), (3, 1.5), (4, 2.5))


def test_plot_writes_a_png(tmp_path: Path) -> None:
    metrics = write_metrics(tmp_path / "metrics.jsonl", [0.1, 0.3, 0.2, 0.5, 0.6], (0, 5))
    png = plot_reward_curve(metrics, tmp_path / "out" / "curve.png", title="test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_without_training_steps_has_no_curve(tmp_path: Path) -> None:
    metrics = write_metrics(tmp_path / "metrics.jsonl", [])
    with pytest.raises(ValueError, match=REWARD_KEY):
        plot_reward_curve(metrics, tmp_path / "curve.png")
    with pytest.raises(ValueError):
        plot_reward_curve(tmp_path / "missing.jsonl", tmp_path / "curve.png")


def test_quarter_means_take_the_first_and_last_quarter_of_the_points() -> None:
    series = Series("r", tuple((step, float(step)) for step in range(1, 10)))  # 9 points
    quarters = quarter_means(series)
    assert quarters is not None and quarters.steps == 2  # 9 // 4
    assert (quarters.first, quarters.last, quarters.rise) == (1.5, 8.5, 7.0)
    assert quarter_means(Series("r", ((1, 0.1), (2, 0.2), (3, 0.3)))) is None  # under 4

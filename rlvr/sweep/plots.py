"""Sweep figures: final reward vs one grid axis (the TuFT guide's "reward vs LR, a line per rank")
and every run's reward curve. matplotlib with the Agg backend, so it works on headless machines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.common.files import staged
from rlvr.sweep.folder import SweepRow
from rlvr.sweep.grid import SweepError
from rlvr.sweep.history import REWARD_KEY
from rlvr.sweep.tables import write_tables


def default_x_axis(axes: Sequence[str]) -> str:
    """The learning rate when it is on the grid, else the first axis."""
    for axis in axes:
        if axis == "lr" or axis.endswith(".lr"):
            return axis
    return axes[0]


def _numeric(values: Sequence[str]) -> list[float] | None:
    try:
        return [float(v) for v in values]
    except ValueError:
        return None


def _series_label(row: SweepRow, series_axes: Sequence[str]) -> str:
    return ", ".join(f"{a.split('.')[-1]}={row.values[a]}" for a in series_axes) or "all runs"


@dataclass
class _XAxis:
    name: str
    values: list[str]  # the grid's own values, as written, in grid order
    position: dict[str, float]  # value -> x coordinate (its number, or its index)
    log: bool

    @classmethod
    def of(cls, rows: Sequence[SweepRow], name: str) -> _XAxis:
        values = list(dict.fromkeys(row.values[name] for row in rows))
        numeric = _numeric(values)
        coordinates = numeric if numeric else [float(i) for i in range(len(values))]
        log = bool(numeric and min(numeric) > 0 and max(numeric) / min(numeric) >= 10)
        return cls(name, values, dict(zip(values, coordinates, strict=True)), log)

    def x(self, row: SweepRow) -> float:
        return self.position[row.values[self.name]]


def _plot_series(ax: Any, members: Sequence[SweepRow], x_axis: _XAxis, colour: str) -> set[str]:
    """One series' line of final rewards and its collapse/failure markers; returns the markers
    drawn ("collapsed", "failed")."""
    points = [
        (x_axis.x(r), r.summary.final_reward)
        for r in members
        if r.summary is not None and r.summary.final_reward is not None
    ]
    if points:
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, marker="o", color=colour)
    marked = set()
    for r in members:
        x, summary = x_axis.x(r), r.summary
        if summary is not None and summary.collapsed:  # a NaN run has no final: draw at 0
            y = summary.final_reward if summary.final_reward is not None else 0.0
            ax.scatter(
                [x],
                [y],
                marker="X",
                s=170,
                color=colour,
                edgecolors="red",
                linewidths=2,
                zorder=5,
                label="_collapsed",
            )
            marked.add("collapsed")
        elif summary is None or summary.final_reward is None:
            ax.scatter([x], [0.0], marker="x", s=90, color=colour, zorder=4, label="_failed")
            marked.add("failed")
    return marked


def _marker_handles(marked: set[str]) -> list[Any]:
    from matplotlib.lines import Line2D

    handles = []
    if "collapsed" in marked:
        handles.append(
            Line2D(
                [],
                [],
                marker="X",
                linestyle="",
                markersize=11,
                markerfacecolor="white",
                markeredgecolor="red",
                markeredgewidth=2,
                label="collapsed (NaN: drawn at 0)",
            )
        )
    if "failed" in marked:
        handles.append(
            Line2D([], [], marker="x", linestyle="", color="grey", label="failed / no metrics")
        )
    return handles


def _finish_final_axes(ax: Any, rows: Sequence[SweepRow], x_axis: _XAxis, title: str) -> None:
    finals = [
        r.summary.final_reward for r in rows if r.summary and r.summary.final_reward is not None
    ]
    ax.set_ylim(-0.03, max([0.1, *finals]) * 1.1)  # rewards are >= 0; keep the zero line visible
    if x_axis.log:
        ax.set_xscale("log")
        ax.minorticks_off()
    ax.set_xticks(list(x_axis.position.values()), x_axis.values)
    short = x_axis.name.split(".")[-1]
    ax.set_xlabel(short + (" (log scale)" if x_axis.log else ""))
    ax.set_ylabel(f"final reward (mean {REWARD_KEY}, last steps)")
    ax.set_title(title or f"final reward vs {short}")
    ax.grid(True, alpha=0.3)


def _save(fig: Any, path: Path) -> None:
    """Save a figure whole or not at all (a figure half-written by Ctrl-C is a broken PNG)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with staged(path) as staging:
        fig.savefig(staging, dpi=120, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)


def plot_final_reward(rows: Sequence[SweepRow], x_axis: str, path: Path, title: str = "") -> Path:
    """Final reward against ``x_axis``, one line per combination of the other axes.

    Collapsed runs are crosses edged in red (at 0 when the run went NaN); failed runs (no
    metrics) sit on the x axis as thin crosses, so a hole in the grid is visible rather than
    silently missing. Marker colours follow their series.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    if not rows:
        raise SweepError("no runs to plot")
    axes = list(rows[0].values)
    if x_axis not in axes:
        raise SweepError(f"--x {x_axis!r} is not a grid axis ({', '.join(axes)})")
    series_axes = [a for a in axes if a != x_axis]
    x = _XAxis.of(rows, x_axis)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = list(dict.fromkeys(_series_label(row, series_axes) for row in rows))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    handles, marked = [], set()
    for index, label in enumerate(labels):
        colour = palette[index % len(palette)]
        members = sorted((r for r in rows if _series_label(r, series_axes) == label), key=x.x)
        marked |= _plot_series(ax, members, x, colour)
        handles.append(Line2D([], [], color=colour, marker="o", label=label))
    _finish_final_axes(ax, rows, x, title)
    ax.legend(handles=handles + _marker_handles(marked), fontsize=8)
    _save(fig, path)
    return path


def plot_reward_curves(rows: Sequence[SweepRow], path: Path, title: str = "") -> Path:
    """Reward per training step for every run that logged one; collapsed runs dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [(r.name, r.summary) for r in rows if r.summary is not None and r.summary.rewards]
    if not curves:
        raise SweepError("no run logged a training step; nothing to plot")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, summary in curves:
        steps, values = zip(*summary.rewards, strict=True)
        style = "--" if summary.collapsed else "-"
        label = name + (" (collapsed)" if summary.collapsed else "")
        ax.plot(steps, values, style, marker="." if len(steps) < 30 else None, label=label)
    from matplotlib.ticker import MaxNLocator

    rewards = [r for _, summary in curves for _, r in summary.rewards if math.isfinite(r)]
    ax.set_ylim(-0.03, max([0.1, *rewards]) * 1.1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_xlabel("training step")
    ax.set_ylabel(REWARD_KEY)
    ax.set_title(title or "reward curves")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(curves) > 8 else 1)
    _save(fig, path)
    return path


def write_report(
    sweep_dir: Path, record: dict, rows: Sequence[SweepRow], x_axis: str | None = None
) -> list[Path]:
    """Tables and both figures under the sweep folder; returns the paths written."""
    axes = list(rows[0].values) if rows else []
    if not axes:
        raise SweepError(f"{sweep_dir}: the sweep record has no grid points; nothing to report")
    x_axis = x_axis or default_x_axis(axes)
    if x_axis not in axes:  # before anything is written: a bad --x leaves the folder as it was
        raise SweepError(f"--x {x_axis!r} is not a grid axis ({', '.join(axes)})")
    written = write_tables(sweep_dir, record, rows)
    short = x_axis.split(".")[-1]
    name = record["name"]
    written.append(
        plot_final_reward(
            rows,
            x_axis,
            sweep_dir / f"final_reward_vs_{short}.png",
            title=f"{name}: final reward vs {short}",
        )
    )
    if any(r.summary is not None and r.summary.rewards for r in rows):
        written.append(
            plot_reward_curves(rows, sweep_dir / "reward_curves.png", title=f"{name}: reward")
        )
    return written

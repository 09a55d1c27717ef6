"""The report's figures: one PNG per health signal, with each fired alarm's steps marked.

matplotlib with the Agg backend (headless machines); each PNG is written beside its final name
and renamed over it, so a reader (or ``--follow``'s next pass) never sees half a file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.common.files import staged
from rlvr.report import alarms as checks
from rlvr.report.alarms import Alarm
from rlvr.report.records import RunRecords, zero_spread_series

Points = Sequence[tuple[int, float]]


@dataclass(frozen=True)
class Line:
    label: str
    points: Points
    style: str = "-"  # matplotlib line style; "" draws markers only
    marker: str = "o"


@dataclass(frozen=True)
class Panel:
    ylabel: str
    lines: tuple[Line, ...]
    limits: tuple[float, ...] = ()  # alarm thresholds, drawn as dotted horizontal lines
    band: tuple[Points, Points] | None = None  # (low, high) shaded behind the first line
    log: bool = False
    top: float | None = None  # a fixed top of the y axis (shares: 1)


@dataclass(frozen=True)
class Figure:
    name: str  # the PNG's stem and the key alarms point at (Alarm.figure)
    title: str
    panels: tuple[Panel, ...] = field(default=())

    @property
    def has_data(self) -> bool:
        return any(line.points for panel in self.panels for line in panel.lines)


def figure_specs(records: RunRecords) -> list[Figure]:
    """What to draw, from the records; figures with no data are kept (drawing skips them)."""
    return [build(records) for build in _FIGURES]


def _reward_figure(records: RunRecords) -> Figure:
    val_key = records.val_key()
    lines = [Line(f"{checks.SCORE} (training batch)", records.finite(checks.SCORE))]
    if val_key:
        lines.append(Line(f"{val_key} (validation)", records.finite(val_key), "--", "s"))
    band = (records.finite("critic/score/min"), records.finite("critic/score/max"))
    panel = Panel("score / accuracy", tuple(lines), band=band)
    return Figure("reward", "reward: training score and validation", (panel,))


def _entropy_figure(records: RunRecords) -> Figure:
    entropy = records.finite(checks.ENTROPY)
    # the entropy alarm's floor depends on the first step's entropy (alarms/metric_rules.py)
    limit = (
        (max(checks.ENTROPY_FLOOR, checks.ENTROPY_FALL_FRACTION * entropy[0][1]),)
        if entropy
        else ()
    )
    panel = Panel("entropy (nats/token)", (Line(checks.ENTROPY, entropy),), limit)
    return Figure("entropy", "policy entropy", (panel,))


def _length_figure(records: RunRecords) -> Figure:
    lines = (
        Line(checks.LENGTH, records.finite(checks.LENGTH)),
        Line("response_length/max", records.finite("response_length/max"), ":"),
    )
    return Figure("length", "response length", (Panel("tokens", lines),))


def _clip_figure(records: RunRecords) -> Figure:
    lines = (
        Line(f"{checks.LENGTH_CLIP} (cut at max length)", records.finite(checks.LENGTH_CLIP)),
        Line(
            f"{checks.PG_CLIPFRAC} (PPO-clipped tokens)",
            records.finite(checks.PG_CLIPFRAC),
            "--",
            "s",
        ),
    )
    return Figure("clip", "clip ratios", (Panel("share", lines, (checks.LENGTH_CLIP_MAX,)),))


def _kl_figure(records: RunRecords) -> Figure:
    lines = (
        Line("actor/kl_loss (to the reference)", records.finite("actor/kl_loss")),
        Line("actor/ppo_kl (update vs sampler)", records.finite("actor/ppo_kl"), "--", "s"),
    )
    return Figure("kl", "KL to the reference and between updates", (Panel("KL", lines),))


def _grad_norm_figure(records: RunRecords) -> Figure:
    grad = records.finite(checks.GRAD_NORM)
    positive = [value for _, value in grad if value > 0]
    wide = bool(positive) and max(positive) / min(positive) > 30  # log scale past 30x
    panel = Panel("grad norm", (Line(checks.GRAD_NORM, grad),), log=wide)
    return Figure("grad_norm", "gradient norm", (panel,))


def _groups_figure(records: RunRecords) -> Figure:
    groups = zero_spread_series(records)
    lines = (
        Line("from the rollout dumps", [(s, v) for s, v, source in groups if source == "rollouts"]),
        Line(
            "all-equal batch (metrics)",
            [(s, v) for s, v, source in groups if source == "metrics"],
            "",
            "x",
        ),
    )
    panel = Panel("share of groups", lines, (checks.ZERO_SPREAD_MAX,), top=1.05)
    return Figure(
        "groups", "groups with zero spread (all responses to a prompt scored alike)", (panel,)
    )


#: Every figure, in the order the report shows them.
_FIGURES: tuple[Callable[[RunRecords], Figure], ...] = (
    _reward_figure,
    _entropy_figure,
    _length_figure,
    _clip_figure,
    _kl_figure,
    _grad_norm_figure,
    _groups_figure,
)


def draw_figures(
    records: RunRecords, fired: Sequence[Alarm], out_dir: Path, run_name: str = ""
) -> dict[str, Path]:
    """Write ``<name>.png`` under ``out_dir`` for each figure with data; name -> path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: dict[str, Path] = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    first_step = records.steps[0].step if records.steps else 0
    for spec in figure_specs(records):
        if not spec.has_data:
            continue
        marks = [alarm for alarm in fired if alarm.figure == spec.name and alarm.steps]
        fig, axes = plt.subplots(
            len(spec.panels), 1, figsize=(7.5, 3.4 * len(spec.panels) + 0.6), squeeze=False
        )
        for (ax,), panel in zip(axes, spec.panels, strict=True):
            _draw_panel(ax, panel, marks)
            # every figure spans the whole run, so steps line up from one figure to the next
            ax.set_xlim(min(first_step, 1) - 0.5, records.last_step + 0.5)
        axes[0][0].set_title(f"{spec.title}{f': {run_name}' if run_name else ''}", fontsize=10)
        axes[-1][0].set_xlabel("training step")
        fig.tight_layout()
        path = out_dir / f"{spec.name}.png"
        with staged(path) as staging:
            fig.savefig(staging, format="png", dpi=110)
        plt.close(fig)
        written[spec.name] = path
    return written


def _draw_panel(ax: Any, panel: Panel, marks: Sequence[Alarm]) -> None:
    from matplotlib.ticker import MaxNLocator

    if panel.band is not None:
        low, high = panel.band
        if low and [s for s, _ in low] == [s for s, _ in high]:
            ax.fill_between(
                [s for s, _ in low],
                [v for _, v in low],
                [v for _, v in high],
                alpha=0.12,
                color="C0",
                label="batch min-max",
            )
    for index, line in enumerate(panel.lines):
        if line.points:
            ax.plot(
                [s for s, _ in line.points],
                [v for _, v in line.points],
                linestyle=line.style or "none",
                marker=line.marker,
                markersize=4,
                color=f"C{index}",
                label=line.label,
            )
    for limit in panel.limits:
        ax.axhline(limit, color="grey", linestyle=":", linewidth=1, label=f"alarm at {limit:.3g}")
    for number, alarm in enumerate(marks):
        for i, step in enumerate(alarm.steps):
            ax.axvline(
                step,
                color="red" if number == 0 else "darkorange",
                alpha=0.35,
                linewidth=2,
                label=f"alarm: {alarm.title}" if i == 0 else None,
            )
    if panel.log:
        ax.set_yscale("log")
    elif all(v >= 0 for line in panel.lines for _, v in line.points):
        ax.set_ylim(bottom=0)
    if panel.top is not None:
        ax.set_ylim(top=panel.top)
    ax.set_ylabel(panel.ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")

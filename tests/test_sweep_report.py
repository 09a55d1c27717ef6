"""A sweep's results (rlvr/sweep/tables.py, plots.py, scripts/plot_sweep.py) on a recorded
sweep folder: the CSV and Markdown report, and the final-reward figure with collapsed and failed
runs marked.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from rlvr.sweep.folder import load_sweep
from rlvr.sweep.grid import SweepError
from rlvr.sweep.plots import default_x_axis, plot_final_reward, write_report
from rlvr.sweep.tables import results_csv

ROOT = Path(__file__).resolve().parents[1]


def _recorded_sweep(tmp_path: Path) -> Path:
    """A 3x2 sweep folder as the runner leaves it: one collapsed run, one failed, one NaN.
    Each run's metrics.jsonl holds its steps as verl's file logger writes them."""
    curves = {
        "lora_rank8_lr1e-5": [0.1, 0.2, 0.3, 0.35, 0.4, 0.4],
        "lora_rank8_lr1e-4": [0.1, 0.4, 0.6, 0.7, 0.7, 0.72],
        "lora_rank8_lr5e-4": [0.1, 0.5, 0.7, 0.3, 0.1, 0.0],  # collapses
        "lora_rank32_lr1e-5": [0.1, 0.25, 0.35, 0.4, 0.45, 0.45],
        "lora_rank32_lr1e-4": [0.2, 0.3, 0.4, float("nan")],  # NaN
    }
    sweep_dir = tmp_path / "recorded"
    sweep_dir.mkdir()
    record = {
        "name": "recorded",
        "experiment": "countdown_qwen3_4b_lora",
        "grid": {"lora_rank": ["8", "32"], "lr": ["1e-5", "1e-4", "5e-4"]},
        "grid_keys": {
            "lora_rank": "actor_rollout_ref.model.lora_rank",
            "lr": "actor_rollout_ref.actor.optim.lr",
        },
        "overrides": [],
        "keep_checkpoints": False,
    }
    (sweep_dir / "sweep.json").write_text(json.dumps(record))
    for name, values in [*curves.items(), ("lora_rank32_lr5e-4", None)]:
        run = sweep_dir / "runs" / name
        run.mkdir(parents=True)
        state = "failed" if values is None else "finished"
        lines = [
            json.dumps({"step": i, "data": {"critic/score/mean": v}})  # NaN as verl writes it
            for i, v in enumerate(values or [], 1)
        ]
        (run / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
        (run / "output.log").write_text("RuntimeError: CUDA out of memory\n")
        (run / "status.json").write_text(
            json.dumps(
                {
                    "name": name,
                    "values": {},
                    "state": state,
                    "returncode": 0 if values else 1,
                    "reason": "" if values else "exit 1: RuntimeError: CUDA out of memory",
                    "seconds": 1.0,
                    "command": [],
                }
            )
        )
    return sweep_dir


def test_report_on_recorded_metrics(tmp_path: Path) -> None:
    sweep_dir = _recorded_sweep(tmp_path)
    record, rows = load_sweep(sweep_dir)
    by_name = {r.name: r for r in rows}
    assert by_name["lora_rank8_lr5e-4"].summary.collapsed
    assert by_name["lora_rank32_lr1e-4"].summary.collapsed
    assert by_name["lora_rank32_lr5e-4"].state == "failed"
    assert by_name["lora_rank8_lr1e-4"].summary.final_reward == pytest.approx(0.624)

    written = write_report(sweep_dir, record, rows)
    assert [p.name for p in written] == [
        "results.csv",
        "results.md",
        "final_reward_vs_lr.png",
        "reward_curves.png",
    ]
    for png in written[2:]:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    csv_lines = (sweep_dir / "results.csv").read_text().splitlines()
    assert csv_lines[0].startswith("run,lora_rank,lr,state,final_reward")
    assert len(csv_lines) == 7
    markdown = (sweep_dir / "results.md").read_text()
    assert "Best final reward: **lora_rank8_lr1e-4** (0.6240)" in markdown
    assert "CUDA out of memory" in markdown and "actor" not in results_csv(rows[:1])


def test_final_reward_figure_marks_collapse_and_failure(tmp_path: Path) -> None:
    """The figure's content, read back from matplotlib: lines per rank, log x, markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, rows = load_sweep(_recorded_sweep(tmp_path))
    captured = {}
    original = plt.close
    plt.close = lambda fig=None: captured.setdefault("fig", fig)
    try:
        plot_final_reward(rows, default_x_axis(["lora_rank", "lr"]), tmp_path / "f.png")
    finally:
        plt.close = original
    (ax,) = captured["fig"].axes
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1e-5", "1e-4", "5e-4"]
    rank8, rank32 = ax.get_lines()
    assert list(rank8.get_xdata()) == [1e-5, 1e-4, 5e-4]
    assert list(rank32.get_xdata()) == [1e-5]  # the NaN and the failed run have no final reward
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [
        "lora_rank=8",
        "lora_rank=32",
        "collapsed (NaN: drawn at 0)",
        "failed / no metrics",
    ]
    markers: dict[str, list] = {}
    for collection in ax.collections:
        markers.setdefault(collection.get_label(), []).extend(collection.get_offsets().tolist())
    assert markers["_collapsed"] == [[5e-4, pytest.approx(0.32)], [1e-4, 0.0]]
    assert markers["_failed"] == [[5e-4, 0.0]]


def test_plot_refuses_unknown_axis(tmp_path: Path) -> None:
    _, rows = load_sweep(_recorded_sweep(tmp_path))
    with pytest.raises(SweepError, match="not a grid axis"):
        plot_final_reward(rows, "entropy", tmp_path / "x.png")
    with pytest.raises(SweepError, match="not a sweep folder"):
        load_sweep(tmp_path / "nowhere")


def test_plot_sweep_bad_axis_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep_dir = _recorded_sweep(tmp_path)
    before = sorted(p.name for p in sweep_dir.iterdir())
    spec = importlib.util.spec_from_file_location("plot_sweep_cli", ROOT / "scripts/plot_sweep.py")
    assert spec is not None and spec.loader is not None
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    assert cli.main([str(sweep_dir), "--x", "entropy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--x 'entropy' is not a grid axis" in err
    assert sorted(p.name for p in sweep_dir.iterdir()) == before
    assert cli.main([str(sweep_dir), "--x", "lr"]) == 0  # control
    assert (sweep_dir / "final_reward_vs_lr.png").is_file()
    assert not list(sweep_dir.glob(".*.tmp"))

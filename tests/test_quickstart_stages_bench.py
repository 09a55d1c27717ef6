"""benchmarks/quickstart_stages.py in-process on two synthetic quickstart --out folders: an old
one from before stage times and eval timing were recorded (only the total) and a new one with
both; each row's old and new values and their ratio, n/a where the old folder lacks a figure."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from script_loading import load_file_module
from test_paired import write_run

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark() -> ModuleType:
    return load_file_module("quickstart_stages", ROOT / "benchmarks" / "quickstart_stages.py")


def out_folder(path: Path, seconds: int, stages: dict[str, float], timing: dict | None) -> Path:
    """A quickstart --out folder: report total, stage times (if any), one eval run."""
    run = write_run(path / "eval_sft_sampled", [[1.0, 0.0], [0.0, 0.0]])
    if timing is not None:  # as summary.json carries it since the timing was recorded
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "timing": timing}))
    (path / "quickstart_report.json").write_text(json.dumps({"seconds": seconds}))
    if stages:
        lines = [json.dumps({"stage": k, "seconds": v, "status": 0}) for k, v in stages.items()]
        (path / "stage_times.jsonl").write_text("\n".join(lines) + "\n")
    return path


def test_old_and_new_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = out_folder(tmp_path / "old", 100, {}, None)
    timing = {"generation_seconds": 4.0, "generated_tokens": 1000}
    new = out_folder(tmp_path / "new", 80, {"launch_sft": 30.0, "launch_grpo": 40.0}, timing)
    assert load_benchmark().main([str(old), str(new)]) == 0
    printed = capsys.readouterr().out
    assert "| total | 100.0 | 80.0 | 0.80 |" in printed
    assert "| launch_sft | n/a | 30.0 | n/a |" in printed
    assert "| eval_sft_sampled | n/a | 250.0 | n/a |" in printed
    assert load_benchmark().main([str(new), str(new)]) == 0  # the same folder: ratios of 1
    printed = capsys.readouterr().out
    assert "| launch_grpo | 40.0 | 40.0 | 1.00 |" in printed
    assert "| eval_sft_sampled | 250.0 | 250.0 | 1.00 |" in printed


def test_bad_folders_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_benchmark()
    new = out_folder(tmp_path / "new", 80, {"launch_sft": 30.0}, None)
    assert bench.main([str(tmp_path / "missing"), str(new)]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {tmp_path / 'missing'}: no such folder (a quickstart --out folder)\n"
    )
    (tmp_path / "empty").mkdir()
    assert bench.main([str(new), str(tmp_path / "empty")]) == 2
    assert "no stage times, report or timed eval run" in capsys.readouterr().err
    (new / "stage_times.jsonl").write_text("{not json\n")
    assert bench.main([str(new), str(new)]) == 2
    assert "stage_times.jsonl line 1: not a stage time" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        bench.main(["--help"])
    assert done.value.code == 0 and "OLD_OUT NEW_OUT" in capsys.readouterr().out

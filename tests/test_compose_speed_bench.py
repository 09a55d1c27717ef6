"""benchmarks/compose_speed.py in-process: one experiment, both ways, a row with the ratio; a
bad experiment or repeat count is one line, exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from script_loading import load_file_module

ROOT = Path(__file__).resolve().parents[1]


def test_one_experiment_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_file_module("compose_speed", ROOT / "benchmarks" / "compose_speed.py")
    assert bench.main(["countdown_cpu", "--repeats", "1"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "| experiment | Hydra's whole compose s | compose() s | ratio |"
    assert re.fullmatch(r"\| countdown_cpu \| \d+\.\d{3} \| \d+\.\d{3} \| \d+\.\dx \|", rows[2])
    for argv, message in ((["countdown_cpuu"], "did you mean countdown_cpu?"),
                          (["--repeats", "0"], "--repeats must be at least 1")):  # fmt: skip
        with pytest.raises(SystemExit) as done:
            bench.main(argv)
        assert done.value.code == 2 and message in capsys.readouterr().err

"""benchmarks/quickstart_seeds.py in-process on quickstart --out folders written by
scripts/quickstart_report.py (the report's own json, not a hand-made one): a row per seed,
lowest sampled gain first, what each seed misses of the claim, the spread across seeds; bad
--seeds refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from script_loading import load_file_module
from test_quickstart_report import GAIN, load_script, quickstart_out

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark() -> ModuleType:
    return load_file_module("quickstart_seeds", ROOT / "benchmarks" / "quickstart_seeds.py")


def seed_folder(tmp_path: Path, seed: int, grpo: list[list[float]]) -> None:
    """The quickstart's --out of one seed, its report written by the report script itself."""
    out, argv = quickstart_out(tmp_path / f"work_{seed}", grpo)
    assert load_script().main([*argv, "--seed", str(seed)]) == 0
    out.rename(tmp_path / "bench" / f"seed_{seed}")


def test_a_row_per_seed_lowest_gain_first_and_the_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bench").mkdir()
    small = [[1.0] * 4 if i < 3 else [0.0] * 4 for i in range(8)]  # 2 -> 3 of 8 prompts right
    seed_folder(tmp_path, 4, GAIN)  # 2 -> 6 of 8
    seed_folder(tmp_path, 9, small)
    argv = ["--seeds", "4,9", "--out", str(tmp_path / "bench"), "--analyse_only"]
    capsys.readouterr()  # the reports' own output
    assert load_benchmark().main(argv) == 0
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith(("| 4 |", "| 9 |"))]
    assert [row[:5] for row in rows] == ["| 9 |", "| 4 |"]  # +12.5 pt before +50 pt
    assert "**+12.50 pt**" in rows[0] and "**+50.00 pt**" in rows[1]
    assert "sampled gain below +10 pt" in rows[0] and "sampled gain below" not in rows[1]
    records = json.loads((tmp_path / "bench" / "seeds.json").read_text())
    assert [row["seed"] for row in records["rows"]] == [4, 9]
    gains = sorted(row["gain"] for row in records["rows"])
    assert gains == pytest.approx([0.125, 0.5])
    assert "| sampled gain | +31.25 pt | +12.50 pt | +50.00 pt |" in printed
    assert (tmp_path / "bench" / "seeds.md").read_text().strip() == printed.strip()


@pytest.mark.parametrize("seeds", ["a,b", "", "-1", "1,,x"])
def test_bad_seeds_are_refused_in_one_line(seeds: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        load_benchmark().main(["--seeds", seeds, "--analyse_only"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].count("--seeds") == 1


def test_a_seed_without_its_report_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert load_benchmark().main(["--seeds", "3", "--out", str(tmp_path), "--analyse_only"]) == 2
    assert "seed(s) [3]" in capsys.readouterr().err


def test_the_precision_goes_to_each_seed_not_to_the_old_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--grpo_precision bf16 reaches every seed's quickstart; the old commit's runs as it is."""
    bench = load_benchmark()
    calls: list[tuple[str, list[str]]] = []

    def record(tree: Path, args: list[str], out: Path, timeout_s: float) -> float:
        calls.append((out.name, args))
        return 1.0

    monkeypatch.setattr(bench, "run_quickstart", record)
    monkeypatch.setattr(bench, "old_tree", lambda commit, folder: folder)
    argv = ["--seeds", "1,2", "--out", str(tmp_path), "--old", "9697216"]
    argv += ["--grpo_precision", "bf16"]
    assert bench.main(argv) == 2  # no reports were written: the seeds are named, nothing read
    assert calls == [
        ("old", []),
        ("seed_1", ["--seed", "1", "--grpo_precision", "bf16"]),
        ("seed_2", ["--seed", "2", "--grpo_precision", "bf16"]),
    ]

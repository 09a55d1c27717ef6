"""The run report (rlvr/report, scripts/report.py): report.md and its figures from a run
folder, and the CLI end to end (bad input, --follow). The alarms' own tests: tests/test_alarms.py.

Fixtures (tests/data/report/): quickstart_smollm2/ and bench3/ are real recorded metrics;
countdown_run/ is constructed in verl's formats by make_fixtures.py there.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlvr import report as run_report
from rlvr.report.alarms import Alarm
from rlvr.report.markdown import step_ranges
from rlvr.report.records import load_run

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "report"
SCRIPT = ROOT / "scripts" / "report.py"


# --- report and CLI ---------------------------------------------------------------------------


def test_step_ranges() -> None:
    assert step_ranges([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10"
    assert step_ranges([]) == ""


def test_build_writes_the_report_and_the_figures(tmp_path: Path) -> None:
    built = run_report.build(DATA / "quickstart_smollm2", tmp_path)
    assert {a.key for a in built.fired} == {"entropy_collapse", "zero_spread", "length_runaway"}
    assert set(built.figures) == {
        "reward",
        "entropy",
        "length",
        "clip",
        "kl",
        "grad_norm",
        "groups",
    }
    for path in built.figures.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = built.path.read_text()
    assert "**FIRED: entropy collapse** at steps 3-4" in text and "**Try:**" in text
    assert "![entropy](entropy.png)" in text
    assert all(isinstance(alarm, Alarm) for alarm in built.alarms)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_cli_end_to_end_on_a_fixture_run(tmp_path: Path) -> None:
    run = tmp_path / "countdown_run"
    shutil.copytree(DATA / "countdown_run", run)
    done = run_cli(str(run))
    assert done.returncode == 0, done.stderr
    assert "ALARM suspected reward hacking: steps [8, 12]" in done.stdout
    text = (run / "report.md").read_text()
    assert "**FIRED: suspected reward hacking** at steps 8, 12" in text
    assert "- ok: entropy collapse" in text
    assert sorted(p.name for p in run.glob("*.png")) == sorted(
        f"{name}.png"
        for name in ("reward", "entropy", "length", "clip", "kl", "grad_norm", "groups")
    )
    assert not list(run.glob(".*tmp"))  # staging files renamed away


def bad_metrics(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(text)
    return folder


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (lambda tmp: tmp / "missing", [], "no such run folder"),
        (lambda tmp: tmp, [], "no metrics.jsonl"),
        (lambda tmp: bad_metrics(tmp / "r", ""), [], "no step logged"),
        (lambda tmp: bad_metrics(tmp / "r", "not json\n{}\n"), [], "not a step record"),
        (lambda tmp: DATA / "bench3", ["--interval", "0"], "--interval 0"),
        (lambda tmp: DATA / "bench3", ["--task", "chess"], "unknown task 'chess'"),
        (lambda tmp: DATA / "bench3", ["--out", str(ROOT / "pyproject.toml")], "not a folder"),
        (lambda tmp: DATA / "bench3", ["--out", str(ROOT / "pyproject.toml/x")], "not a folder"),
        # Was a FileNotFoundError traceback from mkdir.
        (lambda tmp: DATA / "bench3", ["--out", "/proc/rlvr-report"], "cannot write in /proc"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, extra: list[str], message: str
) -> None:
    spec = importlib.util.spec_from_file_location("_report_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    run = make(tmp_path)  # type: ignore[operator]
    code: object
    try:
        code = script.main([str(run), *extra])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_metrics_names_the_run_folders_inside() -> None:
    with pytest.raises(run_report.ReportError, match=r"runs inside it: .*bench3"):
        load_run(DATA)


def test_follow_rewrites_the_report_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()  # nothing logged yet: --follow waits
    cmd = [sys.executable, str(SCRIPT), str(run), "--follow", "--interval", "0.2"]
    follow = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    assert follow.stderr is not None
    threading.Thread(target=lambda: said.extend(follow.stderr), daemon=True).start()  # type: ignore[arg-type]
    try:
        assert wait_for(lambda: any("waiting:" in line for line in said))
        lines = (DATA / "quickstart_smollm2" / "metrics.jsonl").read_text().splitlines()
        (run / "metrics.jsonl").write_text("\n".join(lines[:3]) + "\n")
        report = run / "report.md"
        assert wait_for(lambda: "last step logged: 2" in _read(report))
        (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")  # the run goes on
        assert wait_for(lambda: "last step logged: 4" in _read(report))
        follow.send_signal(signal.SIGINT)
        follow.wait(timeout=60)
    finally:
        if follow.poll() is None:
            follow.kill()
    time.sleep(0.2)  # the reader thread takes the last line
    err = "".join(said)
    assert follow.returncode == 0, err
    assert "stopped; last report:" in err and "Traceback" not in err
    assert report.read_text().endswith("Thresholds and advice: docs/REPORT.md.\n")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def wait_for(condition: object, timeout: float = 90.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_rollout_dump_lines_that_are_not_responses_are_skipped_and_noted(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / "countdown_run", run)
    dump = run / "rollouts" / "4.jsonl"
    dump.write_text(dump.read_text() + json.dumps({"input": 1}) + "\n" + '{"cut sh')
    loaded = load_run(run)
    assert len(loaded.rollouts[4]) == 32
    assert loaded.notes == ("rollouts/4.jsonl: 2 unreadable line(s) skipped",)

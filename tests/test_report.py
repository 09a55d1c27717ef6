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
from rlvr.report.alarms import CHECKS, Alarm
from rlvr.report.metrics_log import step_ranges
from rlvr.report.records import load_run
from rlvr.report.run_plan import read_run_plan, write_run_plan

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


def run_main(*argv: str) -> object:
    """scripts/report.py's main in this process: its exit code (argparse's too)."""
    spec = importlib.util.spec_from_file_location("_report_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    try:
        return script.main(list(argv))
    except SystemExit as exc:
        return exc.code


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
        # Was "no step logged (empty file)": the one line there is torn, not absent.
        (
            lambda tmp: bad_metrics(tmp / "r", '{"step": 1, "da'),
            [],
            "r/metrics.jsonl:1: last line skipped (15 bytes without a newline): cut short",
        ),
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
    run = make(tmp_path)  # type: ignore[operator]
    code = run_main(str(run), *extra)
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


# --- the run's status (run_plan.json, verl's tracker) and what reading skipped -------------------


def step_line(step: int, **extra: object) -> str:
    return json.dumps({"step": step, "data": {"critic/score/mean": step / 10, **extra}}) + "\n"


TORN_STEP_4 = '{"step": 4, "data": {"critic/sc'  # 31 bytes, no newline: killed mid-write
PLAN_5 = '{"total_training_steps": 5, "experiment": "e"}'
UNKNOWN = "length unknown (run_plan.json unreadable, see notes): last step logged 5"

#: (id, steps logged, text after them, run_plan.json, tracker, status, notes). Every status but
#: "complete: 5 of 5" and the plain "length unknown" was "no word" before: report.md said only
#: "last step logged: K" and scripts/report.py printed no status or note.
STATUS_CASES = [
    ("complete", range(6), "", PLAN_5, "5", "complete: 5 of 5 steps logged", []),
    (
        "killed_at_step_3",
        range(4),
        "",
        PLAN_5,
        "2",
        "stopped early (or still running): last step logged 3 of 5 planned",
        [],
    ),
    (
        "torn_last_line",
        range(4),
        TORN_STEP_4,
        PLAN_5,
        None,
        "stopped early (or still running): last step logged 3 of 5 planned",
        [
            "metrics.jsonl:5: last line skipped (31 bytes without a newline): cut short: "
            "a killed run, or one still writing"
        ],
    ),
    (
        "tracker_beyond_metrics",
        range(4),
        "",
        PLAN_5,
        "4",
        "metrics lines missing for the steps after 3: last step logged 3 of 5 planned, but the "
        "checkpoint tracker (latest_checkpointed_iteration.txt) says step 4 was saved (lines "
        "lost, or not written yet); this report ends at step 3",
        [],
    ),
    (
        "a_step_lost_in_the_middle",
        [0, 1, 2, 4, 5],
        "",
        PLAN_5,
        None,
        "incomplete: 4 of 5 steps logged; no metrics line for step(s) 3",
        [],
    ),
    (
        "no_plan",
        range(6),
        "",
        None,
        None,
        "length unknown (no run_plan.json): last step logged 5",
        [],
    ),
    (
        "plan_garbage",
        range(6),
        "",
        "{not json",
        None,
        UNKNOWN,
        ["run_plan.json: not read (Invalid JSON: key must be a string at line 1 column 2)"],
    ),
    (
        "plan_step_count_a_string",
        range(6),
        "",
        '{"total_training_steps": "5"}',
        None,
        UNKNOWN,
        ["run_plan.json: not read (total_training_steps: Input should be a valid integer)"],
    ),
    (
        "plan_zero_steps",
        range(6),
        "",
        '{"total_training_steps": 0}',
        None,
        UNKNOWN,
        ["run_plan.json: not read (total_training_steps: Input should be greater than or equal"],
    ),
    (
        "tracker_empty",
        range(6),
        "",
        PLAN_5,
        "",
        "complete: 5 of 5 steps logged",
        ["latest_checkpointed_iteration.txt: holds no step number"],
    ),
]


@pytest.mark.parametrize(
    ("steps", "tail", "plan", "tracker", "status", "notes"),
    [case[1:] for case in STATUS_CASES],
    ids=[case[0] for case in STATUS_CASES],
)
def test_the_report_states_how_far_the_run_got_and_every_line_it_skipped(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    steps: list[int],
    tail: str,
    plan: str | None,
    tracker: str | None,
    status: str,
    notes: list[str],
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(step_line(step) for step in steps) + tail)
    if plan is not None:
        (run / "run_plan.json").write_text(plan)
    if tracker is not None:
        (run / "latest_checkpointed_iteration.txt").write_text(tracker)
    assert run_main(str(run)) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    printed = out.splitlines()
    assert f"status: {status}" in printed
    said = [line.removeprefix("note: ") for line in printed if line.startswith("note: ")]
    assert len(said) == len(notes), said
    assert all(want in line for want, line in zip(notes, said, strict=True)), said
    text = (run / "report.md").read_text()
    assert text.startswith(f"# Run report: run\n\n**Status: {status}.**\n")
    assert all(want in text for want in notes)
    # The status is no alarm: the alarms' count stays the checks' count.
    assert f" of {len(CHECKS)} fired" in text


def test_a_sweep_points_tracker_is_read_where_the_plan_says_the_checkpoints_are(
    tmp_path: Path,
) -> None:
    run = tmp_path / "point"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(step_line(step) for step in range(4)))
    write_run_plan(run, 5, "sweep_point", checkpoints=run / "checkpoints")
    (run / "checkpoints").mkdir()
    assert load_run(run).status.startswith("stopped early")  # negative control: no tracker yet
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("4")
    assert load_run(run).status.startswith("metrics lines missing for the steps after 3")


def test_values_that_are_not_numbers_are_left_out_with_one_note(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = [step_line(1, tag="a", flag=True), step_line(2, tag="b"), step_line(3)]
    (run / "metrics.jsonl").write_text("".join(lines))
    loaded = load_run(run)
    assert loaded.steps[0].metrics == {"critic/score/mean": 0.1}
    assert loaded.notes == (
        f"{run / 'metrics.jsonl'}: 3 value(s) that are not numbers left out (the first: 'tag' "
        "at step 1); the report reads numbers only",
    )
    (run / "metrics.jsonl").write_text(step_line(1) + step_line(2))
    assert load_run(run).notes == ()  # negative control: numbers only, no note


def test_the_run_plan_is_written_whole_and_read_back(tmp_path: Path) -> None:
    path = write_run_plan(tmp_path, 12, "countdown_qwen3_4b")
    assert path == tmp_path / "run_plan.json"
    assert json.loads(path.read_text()) == {
        "total_training_steps": 12,
        "experiment": "countdown_qwen3_4b",
        "checkpoints": None,
    }
    assert [p.name for p in tmp_path.iterdir()] == ["run_plan.json"]  # no staging file left
    plan, note = read_run_plan(tmp_path)
    assert plan is not None and note is None
    assert (plan.total_training_steps, plan.experiment) == (12, "countdown_qwen3_4b")
    assert read_run_plan(tmp_path / "absent") == (None, None)
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "run_plan.json").mkdir()
    assert read_run_plan(tmp_path / "dir") == (
        None,
        "run_plan.json: not read (IsADirectoryError); the run's length is unknown",
    )


@pytest.mark.parametrize("bad", [0, -1, True, "5", 5.0])
def test_writing_a_run_plan_refuses_a_step_count_that_is_no_positive_integer(
    tmp_path: Path, bad: object
) -> None:
    with pytest.raises(ValueError, match=r"^run plan: total_training_steps: Input should be"):
        write_run_plan(tmp_path, bad, None)  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir())

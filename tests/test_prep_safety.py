"""Data prep against bad input and interruptions: every refusal is exit 2 with one line naming the
flag or file, before any work, and the output folder is left exactly as it was; SIGINT/SIGTERM
at any moment leave the old files or the new ones, whole, never a mix."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from rlvr.common import files
from rlvr.data import prep
from rlvr.tasks import countdown, gsm8k, prep_cli

ROOT = Path(__file__).resolve().parents[1]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _countdown_rows(extra: dict | None = None) -> list[dict]:
    rows = [{"nums": [i % 7 + 1, i % 5 + 2, 3], "target": i % 20 + 1} for i in range(30)]
    return rows + ([extra] if extra else [])


def _gsm8k_rows(extra: dict | None = None) -> list[dict]:
    rows = [
        {"question": f"What is {i} + 1?", "answer": f"{i} + 1\n#### {i + 1}"} for i in range(30)
    ]
    return rows + ([extra] if extra else [])


# Each case: (id, task, source rows or None, flags). "{src}" is replaced by the source file.
BIG = 10**9
CASES = [
    # sizes, named by their flag
    *[
        (f"{task}{flag}{value}", task, None, [flag, value])
        for task in ("countdown", "gsm8k")
        for flag in ("--train_size", "--test_size")
        for value in ("-1", "0", "10000001", "ten", "1e3")
    ],
    ("gsm8k--val_size-1", "gsm8k", None, ["--val_size", "-1"]),
    ("gsm8k--val_size-huge", "gsm8k", None, ["--val_size", "99999999"]),
    ("gsm8k-val-eats-train", "gsm8k", _gsm8k_rows(), ["--test_size", "5", "--val_size", "25"]),
    ("countdown-generate-too-many", "countdown", None, ["--train_size", "2000000"]),
    # generator flags beyond what the reward grades, or malformed
    ("max_number-0", "countdown", None, ["--max_number", "0"]),
    ("max_number-1e9", "countdown", None, ["--max_number", str(BIG)]),
    ("target_range-1e9", "countdown", None, ["--target_range", f"1,{BIG}"]),
    ("target_range--1e9", "countdown", None, ["--target_range", f"-{BIG},5"]),
    ("target_range-reversed", "countdown", None, ["--target_range", "9,1"]),
    ("target_range-one", "countdown", None, ["--target_range", "5"]),
    ("num_range-1", "countdown", None, ["--num_range", "1,3"]),
    ("num_range-9", "countdown", None, ["--num_range", "2,9"]),
    ("template", "countdown", None, ["--template", "bogus"]),
    ("unknown-flag", "countdown", None, ["--trian_size", "5"]),
    # file tasks the reward could not grade
    ("number-1e9", "countdown", _countdown_rows({"nums": [BIG, 1], "target": 3}), []),
    ("target-1e9", "countdown", _countdown_rows({"nums": [2, 1], "target": BIG}), []),
    ("17-numbers", "countdown", _countdown_rows({"nums": [1] * 17, "target": 3}), []),
    ("1e6-numbers", "countdown", _countdown_rows({"nums": [1] * 10**6, "target": 3}), []),
    ("negative-number", "countdown", _countdown_rows({"nums": [-1, 4], "target": 3}), []),
    (
        "solver-9-numbers",
        "countdown",
        _countdown_rows({"nums": [1] * 9, "target": 997}),
        ["--require_solvable"],
    ),
    # GSM8K rows the reward would read differently, or not at all
    ("answer-1,2,14", "gsm8k", _gsm8k_rows({"question": "q?", "answer": "#### 1,2,14"}), []),
    ("answer-exponent", "gsm8k", _gsm8k_rows({"question": "q?", "answer": "#### 1e99999999"}), []),
    ("answer-words", "gsm8k", _gsm8k_rows({"question": "q?", "answer": "#### twelve"}), []),
    ("question-null", "gsm8k", _gsm8k_rows({"question": None, "answer": "#### 3"}), []),
    ("question-blank", "gsm8k", _gsm8k_rows({"question": "  ", "answer": "#### 3"}), []),
    ("question-number", "gsm8k", _gsm8k_rows({"question": 7, "answer": "#### 3"}), []),
    # sources
    ("countdown-missing-source", "countdown", None, ["--source", "missing.jsonl"]),
    ("gsm8k-missing-source", "gsm8k", None, ["--source", "missing.jsonl"]),
]


def _run(task: str, argv: list[str]) -> int:
    try:
        return prep_cli.main(task, argv)
    except SystemExit as exit_:  # argparse's usage errors
        return int(exit_.code or 0)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else {}


@pytest.fixture(scope="module")
def previous_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A complete earlier prep of each task, copied into each case's output folder."""
    base = tmp_path_factory.mktemp("previous")
    countdown.prepare("generate", base / "countdown", train_size=20, test_size=5)
    source = _jsonl(base / "gsm.jsonl", _gsm8k_rows())
    gsm8k.prepare(str(source), base / "gsm8k", test_size=5, val_size=5)
    return {"countdown": base / "countdown", "gsm8k": base / "gsm8k"}


@pytest.mark.parametrize(("case", "task", "rows", "flags"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("existing", [False, True], ids=["new-folder", "old-output"])
def test_bad_input_exits_2_in_one_line_and_leaves_the_output_alone(
    case: str,
    task: str,
    rows: list[dict] | None,
    flags: list[str],
    existing: bool,
    previous_output: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    if existing:
        shutil.copytree(previous_output[task], out)
    before = _snapshot(out)
    if rows is not None:
        source = ["--source", str(_jsonl(tmp_path / "src.jsonl", rows))]
    else:
        source = ["--source", "generate"] if task == "countdown" else []
        if task == "gsm8k" and "--source" not in flags:
            source = ["--source", str(_jsonl(tmp_path / "src.jsonl", _gsm8k_rows()))]
    extra = ["--test_size", "5"] if rows is not None and "--test_size" not in flags else []
    start = time.perf_counter()
    code = _run(task, [*source, *extra, *flags, "--local_dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    assert time.perf_counter() - start < 30  # refused, not attempted (the solver case included)


def test_the_bad_input_table_has_a_passing_twin(
    previous_output: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Negative control: the same harness accepts good input, and replaces the old output."""
    out = tmp_path / "out"
    shutil.copytree(previous_output["countdown"], out)
    before = _snapshot(out)
    source = str(_jsonl(tmp_path / "src.jsonl", _countdown_rows()))
    argv = ["--source", source, "--test_size", "5", "--require_solvable", "--local_dir", str(out)]
    assert _run("countdown", argv) == 0, capsys.readouterr().err
    assert _snapshot(out) != before and set(_snapshot(out)) == {"train.parquet", "test.parquet"}


@pytest.mark.parametrize("task", ["countdown", "gsm8k"])
def test_a_folder_holding_other_files_is_refused(
    task: str, previous_output: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The output folder is replaced whole, so one holding someone's files is not ours."""
    out = tmp_path / "out"
    shutil.copytree(previous_output[task], out)
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)
    source = ["--source", "generate"] if task == "countdown" else []
    if task == "gsm8k":
        source = ["--source", str(_jsonl(tmp_path / "src.jsonl", _gsm8k_rows()))]
    assert _run(task, [*source, "--test_size", "5", "--local_dir", str(out)]) == 2
    assert "holds notes.txt" in capsys.readouterr().err
    assert _snapshot(out) == before
    (out / "notes.txt").unlink()  # negative control: without it the rerun goes through
    assert _run(task, [*source, "--test_size", "5", "--local_dir", str(out)]) == 0


def test_a_file_as_local_dir_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    target = tmp_path / "data"
    target.write_text("a file")
    assert _run("countdown", ["--source", "generate", "--local_dir", str(target)]) == 2
    assert "is a file" in capsys.readouterr().err and target.read_text() == "a file"


@pytest.mark.parametrize("kind", ["dangling", "live"])
def test_a_symlink_as_local_dir_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture, kind: str
) -> None:
    """A dangling link made prep create its target elsewhere; a live one would be replaced."""
    target = tmp_path / "target"
    if kind == "live":
        target.mkdir()
    link = tmp_path / "data"
    link.symlink_to(target)
    assert _run("countdown", ["--source", "generate", "--local_dir", str(link)]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"error: --local_dir {link}: is a symbolic link (to {target}); pass the "
        "folder itself\n"
    )
    assert link.is_symlink() and target.exists() == (kind == "live")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["data"] + ["target"] * (kind == "live")
    )


def test_a_local_dir_in_a_read_only_folder_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from test_files import unwritable_folder

    out = unwritable_folder(tmp_path) / "data"
    assert _run("countdown", ["--source", "generate", "--local_dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --local_dir {out}: cannot write in") and err.count("\n") == 1


def test_a_copy_left_by_a_killed_prep_is_removed_by_the_next(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f".out.replaced-{int(dead.stdout)}"
    stale.mkdir()
    (stale / "train.parquet").write_text("old")
    countdown.prepare("generate", tmp_path / "out", train_size=20, test_size=5)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


# --- interruptions -----------------------------------------------------------------------------


def test_an_interrupt_while_writing_keeps_the_old_files(
    previous_output: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    shutil.copytree(previous_output["countdown"], out)
    before = _snapshot(out)
    real = Path.write_bytes
    calls = []

    def interrupted(self: Path, data: bytes) -> int:
        calls.append(self)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C after the first split was written
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", interrupted)
    code = prep.run_prep_cli(
        lambda: countdown.prepare("generate", out, train_size=30, test_size=5, seed=9)
    )
    assert code == 130 and len(calls) == 2
    assert _snapshot(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left


def test_a_signal_during_the_swap_waits_for_it(
    previous_output: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the swap's two renames the folder does not exist: SIGTERM there is held back, so
    the swap completes and the new files are there, whole."""
    out = tmp_path / "out"
    shutil.copytree(previous_output["countdown"], out)
    real_swap = files.swap_in

    def signalled_swap(new: Path, destination: Path, aside: Path) -> Path | None:
        os.kill(os.getpid(), signal.SIGTERM)
        return real_swap(new, destination, aside)

    monkeypatch.setattr(files, "swap_in", signalled_swap)
    code = prep.run_prep_cli(
        lambda: countdown.prepare("generate", out, train_size=30, test_size=5, seed=9)
    )
    assert code == 130
    assert len(pd.read_parquet(out / "train.parquet")) == 30  # the new data, complete
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def _run_seed(out: Path, complete: dict[int, tuple[int, int]]) -> int:
    """The seed of the one run the folder holds, asserting it is whole: both files, from one
    run, with that run's complete row counts."""
    assert {p.name for p in out.iterdir()} == {"train.parquet", "test.parquet"}
    frames = {s: pd.read_parquet(out / f"{s}.parquet") for s in ("train", "test")}
    sources = {e["source"] for f in frames.values() for e in f["extra_info"]}
    assert len(sources) == 1, f"mixed runs: {sources}"
    seed = int(sources.pop().split("=")[1].rstrip(")"))
    assert (len(frames["train"]), len(frames["test"])) == complete[seed]
    return seed


SIZES = {1: 300, 2: 8_000}  # old run, new run (its Parquet writes take a moment)


def _signal_when(proc: subprocess.Popen[bytes], staging_seen: Path, moment: str) -> None:
    """Wait for ``moment`` of the run, then SIGINT/SIGTERM it: "startup" (imports), "work"
    (generating), or "staged+N" (N ms after the staging folder appears: the Parquet writes
    and the swap)."""
    if moment == "startup":
        time.sleep(0.5)
    elif moment == "work":
        time.sleep(1.2)
    else:
        deadline = time.perf_counter() + 120
        while proc.poll() is None and time.perf_counter() < deadline:
            if any(p.name.startswith(".data.partial-") for p in staging_seen.iterdir()):
                time.sleep(int(moment.split("+")[1]) / 1000)
                break
            time.sleep(0.002)


@pytest.fixture(scope="module")
def complete_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[int, tuple[int, int]]]:
    """The old run's folder (seed 1), and the complete row counts of the old and new runs."""
    base = tmp_path_factory.mktemp("runs")
    complete = {}
    for seed in (1, 2):
        out = base / f"seed{seed}"
        countdown.prepare("generate", out, train_size=SIZES[seed], test_size=50, seed=seed)
        complete[seed] = (len(pd.read_parquet(out / "train.parquet")), 50)
    return base / "seed1", complete


@pytest.mark.parametrize(
    ("moment", "signum"),
    [
        ("startup", signal.SIGTERM),
        ("work", signal.SIGINT),
        ("staged+0", signal.SIGTERM),
        # more moments of the same window, in the full suite (each a fresh interpreter)
        pytest.param("staged+40", signal.SIGINT, marks=pytest.mark.slow),
        pytest.param("staged+250", signal.SIGTERM, marks=pytest.mark.slow),
    ],
)
def test_sigint_and_sigterm_leave_old_or_new_files_whole(
    moment: str,
    signum: int,
    complete_runs: tuple[Path, dict[int, tuple[int, int]]],
    tmp_path: Path,
) -> None:
    """The script in a subprocess, signalled at a moment of its run: the folder holds one whole
    run afterwards (the old one or the new one), and no staging folder is left."""
    old_run, complete = complete_runs
    out = tmp_path / "data"
    shutil.copytree(old_run, out)
    argv = [sys.executable, str(ROOT / "scripts" / "data_prep_countdown.py"), "--source"]
    argv += ["generate", "--test_size", "50", "--local_dir", str(out), "--seed", "2"]
    argv += ["--train_size", str(SIZES[2])]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _signal_when(proc, tmp_path, moment)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    seed = _run_seed(out, complete)  # one run, whole
    assert seed == 2 if proc.returncode == 0 else seed in (1, 2), (moment, proc.returncode)
    assert [p.name for p in tmp_path.iterdir()] == ["data"], err.decode()[-2000:]
    if proc.returncode == 130:  # our handler ran: its one line, no traceback
        assert err.decode().strip().splitlines()[-1].startswith("interrupted:")

"""Every command line against a table of bad input: exit code 2, one line on stderr that names
the flag or file at fault (no traceback, no usage block), and the work folder byte-for-byte
unchanged (docs/ERRORS.md lists what each command refuses).

Python CLIs run in-process (their ``main``); the shell scripts run as subprocesses behind a stub
``uv``/``python``/``ray`` (``_shims``): ``train.sh`` runs its real pre-flight, and anything
past it (the supervisor, verl, Ray, a LoRA merge) only leaves a marker, so no row can start Ray
or training even if its bad input slips through.
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
STUB_EXIT = 97  # what the stubs exit with: the command got past its checks


@dataclass(frozen=True)
class Case:
    cli: str  # a key of RUNNERS
    argv: tuple[str, ...]  # "{ws}", "{model}"... filled from the workspace
    names: str  # the flag or file the message must name
    pending: str = ""  # "pending: <area>": expected to fail until that area's fix lands

    def filled(self, places: dict[str, str]) -> list[str]:
        return [arg.format(**places) for arg in self.argv]


def C(cli: str, names: str, *argv: str, pending: str = "") -> Case:
    return Case(cli, argv, names, pending)


MODEL_RUN = ("--model_path", "{model}", "--data", "{cd_test}", "--quiet", "--backend", "hf")
NEW = ("--output", "{ws}/new_run")
EVAL = (*MODEL_RUN, *NEW)
OUT = ("--local_dir", "{ws}/out")
GEN = ("--source", "generate", *OUT)
LAUNCH = (
    "countdown_cpu",
    "paths.data={ws}/data",
    "paths.checkpoints={ws}/checkpoints",
    "actor_rollout_ref.model.path={model}",
)

# fmt: off
CASES = [
    # ---- eval_countdown.py: model commands, checked before the model loads
    C("eval_countdown", "--limit", *EVAL, "--limit", "-5"),
    C("eval_countdown", "--limit", *EVAL, "--limit", "1000000000000"),
    C("eval_countdown", "--max_tokens", *EVAL, "--max_tokens", "0"),
    C("eval_countdown", "--max_tokens", *EVAL, "--max_tokens", "4096"),  # > the model's 2048
    C("eval_countdown", "--seed", *EVAL, "--seed", "-1"),
    C("eval_countdown", "--batch_size", *EVAL, "--batch_size", "0"),
    C("eval_countdown", "--n", *EVAL, "passk", "--n", "0"),
    C("eval_countdown", "--n", *EVAL, "passk", "--n", "99999999"),
    C("eval_countdown", "--k", *EVAL, "passk", "--n", "4", "--k", "1,8"),
    C("eval_countdown", "--temperature", *EVAL, "analyse", "--temperature", "-0.5"),
    C("eval_countdown", "--temperature", *EVAL, "analyse", "--temperature", "nan"),
    C("eval_countdown", "--temperature", *EVAL, "analyse", "--temperature", "0"),
    C("eval_countdown", "--top_p", *EVAL, "analyse", "--top_p", "2"),
    C("eval_countdown", "--n", *EVAL, "analyse", "--n", "1"),
    C("eval_countdown", "--model_path", *EVAL[2:], "--model_path", "{ws}/no_such_model"),
    C("eval_countdown", "--model_path", *EVAL[2:], "--model_path", "{ws}/notes.txt"),
    C("eval_countdown", "--model_path", *EVAL[2:], "--model_path", "{ws}/empty_dir"),
    C("eval_countdown", "--model_path", *EVAL[2:], "--model_path", "tests/no_such_model"),
    C("eval_countdown", "reward needs --model_path", *EVAL[2:]),
    C("eval_countdown", "--data", *EVAL, "--data", "{ws}/missing.parquet"),
    C("eval_countdown", "--data", *EVAL, "--data", "{ws}/bad.parquet"),
    C("eval_countdown", "--data", *EVAL, "--data", "{ws}/columns.parquet"),
    C("eval_countdown", "--data", *EVAL, "--data", "{gsm_test}"),  # GSM8K rows: not 0%
    C("eval_countdown", "--data", *EVAL, "--data", "{ws}/data"),
    C("eval_countdown", "formt_score", *EVAL, "--reward_kwargs", '{{"formt_score": 0.1}}'),
    C("eval_countdown", "format_score", *EVAL, "--reward_kwargs", '{{"format_score": 5}}'),
    C("eval_countdown", "--reward_kwargs", *EVAL, "--reward_kwargs", "{{format_score: 1}}"),
    C("eval_countdown", "--reward_kwargs", *EVAL, "--reward_kwargs", "[0.1]"),
    C("eval_countdown", "--template_kwargs", *EVAL, "--template_kwargs", "true"),
    C("eval_countdown", "--experiment", *EVAL, "--experiment", "countdown_qwen3_4"),
    C("eval_countdown", "--experiment", *EVAL, "--experiment", "gsm8k_qwen2_5_3b"),
    C("eval_countdown", "--output", *MODEL_RUN, "--output", "{run}"),  # exists, no --force
    C("eval_countdown", "--output", *MODEL_RUN, "--output", "{ws}/notes_dir", "--force"),
    C("eval_countdown", "--output", *MODEL_RUN, "--output", "{ws}/notes.txt", "--force"),
    C("eval_countdown", "--bogus", *EVAL, "--bogus", "1"),
    C("eval_countdown", "--backend", *EVAL, "--backend", "tpu"),
    C("eval_countdown", "--rollout_n", *EVAL, "passk", "--rollout_n", "4"),  # analyse's alias
    C("eval_countdown", "rewrad", "rewrad", *EVAL),
    # ---- eval_countdown.py: run commands
    C("eval_countdown", "{ws}/missing_run", "stats", "--input", "{ws}/missing_run"),
    C("eval_countdown", "{run}", "stats", "--input", "{run}"),  # a reward run, not analyse
    C("eval_countdown", "--var_min", "stats", "--input", "{analyse}", "--var_min", "-1"),
    C("eval_countdown", "--top", "stats", "--input", "{analyse}", "--top", "0"),
    C("eval_countdown", "--output", "filter", "--input", "{analyse}",
      "--output", "{ws}/kept.parquet"),
    C("eval_countdown", "--entropy_min", "filter", "--input", "{analyse}",
      "--output", "{ws}/f.parquet", "--entropy_min", "2"),
    C("eval_countdown", "{ws}/.run2.partial-1", "filter", "--input", "{ws}/.run2.partial-1",
      "--output", "{ws}/f.parquet"),
    C("eval_countdown", "{ws}/missing_run", "compare", "{run}", "{ws}/missing_run"),
    C("eval_countdown", "TRAINED", "compare", "{run}", "{ws}/.run2.partial-1"),
    C("eval_countdown", "--output", "compare", "{run}", "{analyse}", "--output", "{ws}/table.md"),
    C("eval_countdown", "{ws}/notes.txt", "compare", "{run}", "{ws}/notes.txt"),
    # ---- eval_gsm8k.py and python -m rlvr.evaluation
    C("eval_gsm8k", "--data", "--model_path", "{model}", "--data", "{cd_test}", *NEW),
    C("eval_gsm8k", "methd", "--model_path", "{model}", "--data", "{gsm_test}", *NEW,
      "--reward_kwargs", '{{"methd": "flexible"}}'),
    C("eval_gsm8k", "method", "--model_path", "{model}", "--data", "{gsm_test}", *NEW,
      "--reward_kwargs", '{{"method": "fuzzy"}}'),
    C("eval_module", "nosuchtask", "nosuchtask", "--model_path", "{model}"),
    # ---- data_prep_countdown.py (generated or local tasks only: no network)
    C("prep_countdown", "--train_size", *GEN, "--train_size", "-5"),
    C("prep_countdown", "--test_size", *GEN, "--test_size", "100000000000"),
    C("prep_countdown", "--num_range", *GEN, "--num_range", "3,x"),
    C("prep_countdown", "--num_range", *GEN, "--num_range", "1000000,1000000"),
    C("prep_countdown", "--max_number", *GEN, "--max_number", "10000000000"),
    C("prep_countdown", "--target_range", *GEN, "--target_range", "1,1000000000000"),
    C("prep_countdown", "--template", *GEN, "--template", "fancy"),
    C("prep_countdown", "{ws}/missing.jsonl", "--source", "{ws}/missing.jsonl", *OUT),
    C("prep_countdown", "{ws}/tasks_big.jsonl", "--source", "{ws}/tasks_big.jsonl", *OUT),
    C("prep_countdown", "{ws}/tasks_many.jsonl", "--source", "{ws}/tasks_many.jsonl", *OUT),
    C("prep_countdown", "--local_dir", "--source", "generate", "--local_dir", "{ws}/notes_dir"),
    C("prep_countdown", "--local_dir", "--source", "generate", "--local_dir", "{ws}/notes.txt"),
    # ---- data_prep_gsm8k.py (local files only)
    C("prep_gsm8k", "--val_size", "--source", "{ws}/gsm_ok.jsonl", *OUT, "--val_size", "-1"),
    C("prep_gsm8k", "{ws}/gsm_comma.jsonl", "--source", "{ws}/gsm_comma.jsonl", *OUT),
    C("prep_gsm8k", "{ws}/gsm_huge.jsonl", "--source", "{ws}/gsm_huge.jsonl", *OUT),
    C("prep_gsm8k", "{ws}/gsm_null.jsonl", "--source", "{ws}/gsm_null.jsonl", *OUT),
    C("prep_gsm8k", "{ws}/notes.txt", "--source", "{ws}/notes.txt", *OUT),
    C("prep_gsm8k", "--local_dir", "--source", "{ws}/gsm_ok.jsonl",
      "--local_dir", "{ws}/notes_dir"),
    # ---- build_model.py
    C("build_model", "huge", "huge", "--out", "{ws}/built"),
    C("build_model", "--out", "tiny", "--out", "{ws}/notes.txt"),
    C("build_model", "--out", "tiny", "--out", "{ws}/notes_dir"),
    C("build_model", "--bogus", "tiny", "--out", "{ws}/built", "--bogus"),
    # ---- sweep.py (always --dry_run: a row that slips through still runs nothing)
    C("sweep", "--grid", "--experiment", "countdown_cpu", "--grid", "lr", "--dry_run"),
    C("sweep", "--grid", "--experiment", "countdown_cpu", "--grid", "lr=", "--dry_run"),
    C("sweep", "lrr", "--experiment", "countdown_cpu", "--grid", "lrr=1e-5", "--dry_run"),
    C("sweep", "countdown_cpux", "--experiment", "countdown_cpux", "--grid", "lr=1e-5",
      "--dry_run"),
    C("sweep", "total_trainin_steps", "--experiment", "countdown_cpu", "--grid", "lr=1e-5",
      "--dry_run", "trainer.total_trainin_steps=3"),
    C("sweep", "--timeout_h", "--experiment", "countdown_cpu", "--grid", "lr=1e-5",
      "--timeout_h", "-1", "--dry_run"),
    C("sweep", "--experiment", "--grid", "lr=1e-5", "--dry_run"),
    C("sweep", "lr", "--experiment", "countdown_cpu", "--grid", "lr=1e-5,1e-05,0.00001",
      "--dry_run"),
    # ---- plot_sweep.py, merge_lora.py
    C("plot_sweep", "{ws}/missing_sweep", "{ws}/missing_sweep"),
    C("plot_sweep", "{ws}/notes_dir", "{ws}/notes_dir"),
    C("merge_lora", "{ws}/missing_ckpt", "{ws}/missing_ckpt"),
    C("merge_lora", "--experiment", "--experiment", "nosuch_experiment"),
    C("merge_lora", "checkpoint"),  # no target
    # ---- train.sh: its own argument check; what it passes on is pre-flight's
    C("launch", "EXPERIMENT"),  # no experiment at all
    # ---- pre-flight (python -m rlvr.preflight.checks, the launcher's first step), in-process:
    # the launcher runs it on the same argv (tests/test_preflight.py runs it through the launcher)
    C("preflight", "nosuch_experiment", "nosuch_experiment"),
    C("preflight", "total_trainin_steps", *LAUNCH, "trainer.total_trainin_steps=3"),
    C("preflight", "{ws}/nowhere.parquet", *LAUNCH, "data.train_files={ws}/nowhere.parquet"),
    C("preflight", "{ws}/bad.parquet", *LAUNCH, "data.train_files={ws}/bad.parquet"),
    C("preflight", "{gsm_train}", *LAUNCH, "data.train_files={gsm_train}"),
    C("preflight", "rollout.n", *LAUNCH, "actor_rollout_ref.rollout.n=0"),
    C("preflight", "model.path", *LAUNCH, "actor_rollout_ref.model.path=tests/no_model"),
    C("preflight", "formt_score", *LAUNCH, "+custom_reward_function.reward_kwargs.formt_score=0.1"),
    # ---- ray_cluster.sh and quickstart.sh: argument parsing only
    C("ray_cluster", "--port", "head", "--port", "abc"),
    C("ray_cluster", "bogus", "bogus"),
    C("ray_cluster", "HOST:PORT", "worker"),
    C("quickstart", "--model", "--model", "huge"),
    C("quickstart", "--steps", "--steps", "-1"),
    C("quickstart", "--bogus", "--bogus"),
    C("quickstart", "--steps", "--steps"),
    C("quickstart", "--seed", "--seed", "x"),
]
# fmt: on


# ---------------------------------------------------------------- the work folder


def _write_run(folder: Path, command: str) -> None:
    """A complete eval run folder as the engine writes it (two prompts, n=2)."""
    folder.mkdir()
    header = {
        "command": command, "task": "countdown", "model": "m", "data": "/d/test.parquet",
        "prompts": 2, "backend": "hf", "sampling": {"n": 2, "temperature": 1.0},
        "reward_kwargs": {"format_score": 0.1}, "template_kwargs": {},
    }  # fmt: skip
    metrics = {"mean_score": 0.5, "pass@1": 0.5, "format_rate": 1.0}
    (folder / "summary.json").write_text(json.dumps({**header, **metrics}))
    (folder / "summary.md").write_text("# run\n")
    sample = {"prompt_index": 0, "sample": 0, "response": "x", "score": 1.0}
    (folder / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    if command == "analyse":
        prompt = {
            "prompt_index": 0, "n": 2, "mean_score": 0.5, "success_rate": 0.5, "variance": 0.25,
            "outcome_entropy": 1.0, "token_entropy": None, "ground_truth": {"target": 7},
        }  # fmt: skip
        (folder / "prompts.jsonl").write_text(json.dumps(prompt) + "\n")


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, str]:
    from rlvr.tasks import countdown, gsm8k

    ws = tmp_path_factory.mktemp("adversarial")
    countdown.prepare("generate", ws / "data/countdown", train_size=8, test_size=4, seed=0)
    gsm8k.offline_data(ws / "data/gsm8k", 6, 2)
    _write_run(ws / "run", "reward")
    _write_run(ws / "analyse_run", "analyse")
    (ws / ".run2.partial-1").mkdir()  # what an interrupted eval leaves beside its output
    (ws / ".run2.partial-1/samples.jsonl").write_text('{"prompt_index": 0}\n')
    (ws / "notes.txt").write_text("not data\n")
    (ws / "bad.parquet").write_text("nums,target\n1,2\n")
    pd.DataFrame({"question": ["q"]}).to_parquet(ws / "columns.parquet")
    (ws / "notes_dir").mkdir()
    (ws / "notes_dir/todo.txt").write_text("keep me\n")
    (ws / "empty_dir").mkdir()
    (ws / "table.md").write_text("mine\n")
    (ws / "kept.parquet").write_bytes(b"mine")
    _jsonl(ws / "tasks_big.jsonl", [{"nums": [1_000_000_000, 2, 3], "target": 5}] * 4)
    _jsonl(ws / "tasks_many.jsonl", [{"nums": list(range(1, 18)), "target": 5}] * 4)
    question = "Sam has 3 apples and buys 4 more. How many?"
    _jsonl(ws / "gsm_ok.jsonl", [{"question": question, "answer": "3 + 4 = 7\n#### 7"}] * 8)
    _jsonl(ws / "gsm_comma.jsonl", [{"question": question, "answer": "so\n#### 1,2,14"}] * 8)
    _jsonl(ws / "gsm_huge.jsonl", [{"question": question, "answer": "so\n#### 1e99999999"}] * 8)
    _jsonl(ws / "gsm_null.jsonl", [{"question": None, "answer": "so\n#### 7"}] * 8)
    return {
        "ws": str(ws),
        "model": str(tiny_model_dir),
        "cd_test": str(ws / "data/countdown/test.parquet"),
        "gsm_test": str(ws / "data/gsm8k/test.parquet"),
        "gsm_train": str(ws / "data/gsm8k/train.parquet"),
        "run": str(ws / "run"),
        "analyse": str(ws / "analyse_run"),
    }


def tree_digest(*roots: Path) -> str:
    """Every path under ``roots`` (hidden ones too) with its bytes: any change shows."""
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(root.rglob("*")):
            digest.update(str(path.relative_to(root.parent)).encode())
            if path.is_file() and not path.is_symlink():
                digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


# ---------------------------------------------------------------- running a command line

Result = tuple[int, str]  # exit code, stderr


def _in_process(main: Callable[[list[str]], int | None]) -> Callable[..., Result]:
    def run(argv: list[str], capsys: pytest.CaptureFixture[str], shims: Path) -> Result:
        capsys.readouterr()
        try:
            code = main(argv)
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
        return int(code or 0), capsys.readouterr().err

    return run


def _script_main(name: str) -> Callable[[list[str]], int | None]:
    def main(argv: list[str]) -> int | None:
        return runpy.run_path(str(ROOT / "scripts" / name))["main"](argv)

    return main


def _eval(task: str) -> Callable[[list[str]], int]:
    from rlvr.evaluation.cli import main

    return lambda argv: main(task, f"eval_{task}.py", argv)


def _prep(task: str) -> Callable[[list[str]], int]:
    from rlvr.tasks.prep_cli import main

    return lambda argv: main(task, argv)


def _preflight(argv: list[str]) -> int:
    from rlvr.preflight.checks import main

    return main(argv)


def _merge(argv: list[str]) -> int:
    from rlvr.train.lora_merge import main

    return main(argv)


def _subprocess(*command: str) -> Callable[..., Result]:
    def run(argv: list[str], capsys: pytest.CaptureFixture[str], shims: Path) -> Result:
        env = {
            **{k: v for k, v in os.environ.items() if k != "RLVR_UV_SYNCED"},  # sync is checked
            "PATH": f"{shims}:/usr/bin:/bin",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "WANDB_MODE": "offline",
            "RLVR_LOG_DIR": str(shims / "logs"),
        }
        done = subprocess.run(
            [*command, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        return done.returncode, done.stderr

    return run


RUNNERS: dict[str, Callable[..., Result]] = {
    "eval_countdown": _in_process(_eval("countdown")),
    "eval_gsm8k": _in_process(_eval("gsm8k")),
    "eval_module": _subprocess(sys.executable, "-m", "rlvr.evaluation"),
    "prep_countdown": _in_process(_prep("countdown")),
    "prep_gsm8k": _in_process(_prep("gsm8k")),
    "build_model": _in_process(_script_main("build_model.py")),
    "sweep": _in_process(_script_main("sweep.py")),
    "plot_sweep": _in_process(_script_main("plot_sweep.py")),
    "merge_lora": _in_process(_merge),
    "preflight": _in_process(_preflight),
    "launch": _subprocess("bash", "scripts/train.sh"),
    "ray_cluster": _subprocess("bash", "scripts/ray_cluster.sh"),
    "quickstart": _subprocess("bash", "scripts/quickstart.sh"),
}

PYTHON_STUB = """#!/usr/bin/env bash
# The launchers' interpreter: pre-flight runs for real, anything after it only leaves a marker.
if [[ "$1" == -m && "$2" == rlvr.preflight.checks ]]; then exec {python} "$@"; fi
echo "$*" >> {shims}/ran_past_checks
echo "stub: would run python $*" >&2
exit {code}
"""
UV_STUB = """#!/usr/bin/env bash
# `uv sync` (scripts/lib/ensure_uv.sh, which the launchers source) passes and is logged;
# `uv run ... python -c 'print(sys.executable)'` answers the stub python; other runs go to it.
if [[ "$1" == sync ]]; then echo "uv $*" >> {shims}/uv_syncs; exit 0; fi
for arg in "$@"; do [[ "$arg" == *sys.executable* ]] && {{ echo {shims}/python; exit 0; }}; done
while [[ $# -gt 0 && "$1" != python ]]; do shift; done
shift
exec {shims}/python "$@"
"""
RAY_STUB = """#!/usr/bin/env bash
echo "ray $*" >> {shims}/ran_past_checks
exit {code}
"""


@pytest.fixture(scope="module")
def shims(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("shims")
    for name, text in (("python", PYTHON_STUB), ("uv", UV_STUB), ("ray", RAY_STUB)):
        stub = folder / name
        stub.write_text(text.format(python=sys.executable, shims=folder, code=STUB_EXIT))
        stub.chmod(0o755)
    return folder


def _param(index: int, case: Case) -> object:
    marks = [pytest.mark.xfail(reason=case.pending, strict=False)] if case.pending else []
    return pytest.param(case, id=f"{index:03d}-{case.cli}-{case.names}", marks=marks)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")


@pytest.mark.parametrize("case", [_param(i, case) for i, case in enumerate(CASES)])
def test_bad_input_is_refused_in_one_line(
    case: Case,
    workspace: dict[str, str],
    shims: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    roots = (Path(workspace["ws"]), Path(workspace["model"]))
    before = tree_digest(*roots)
    argv = case.filled(workspace)
    code, err = RUNNERS[case.cli](argv, capsys, shims)
    lines = [line for line in err.splitlines() if line.strip()]
    assert not (shims / "ran_past_checks").exists(), (
        "got past its checks: " + (shims / "ran_past_checks").read_text()
    )
    assert code == 2, f"exit {code}: {err[-2000:]}"
    assert "Traceback" not in err, err[-2000:]
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{err[-2000:]}"
    assert case.names.format(**workspace) in lines[0], lines[0]
    assert tree_digest(*roots) == before, "the work folder changed"


def test_the_table_covers_every_command_line() -> None:
    """At least 60 rows, and each CLI has some that are expected to pass today."""
    assert len(CASES) >= 60
    assert {case.cli for case in CASES} == set(RUNNERS)
    assert {case.cli for case in CASES if not case.pending} >= set(RUNNERS) - {"launch"}


def test_negative_control_good_input_gets_past_the_checks(
    workspace: dict[str, str], shims: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same harness with good input: eval exits 0 and pre-flight passes (the stub behind it
    then answers), so the refusals above come from the checks, not from the harness."""
    out = Path(workspace["ws"]) / "control_run"
    argv = [a.format(**workspace) for a in MODEL_RUN]
    argv += ["--output", str(out), "--limit", "1", "--max_tokens", "2"]
    code, err = RUNNERS["eval_countdown"](argv, capsys, shims)
    assert code == 0 and (out / "summary.json").is_file(), err
    launch = [a.format(**workspace) for a in LAUNCH]
    code, err = RUNNERS["launch"](launch, capsys, shims)
    marker = shims / "ran_past_checks"
    try:
        assert code == STUB_EXIT and "rlvr.train.launch" in marker.read_text(), err[-3000:]
        assert "uv sync --locked --inexact" in (shims / "uv_syncs").read_text()
    finally:
        marker.unlink(missing_ok=True)

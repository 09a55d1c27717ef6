"""docs/ADDING_A_TASK.md, proven: in a copy of this working tree, a third task ("parity") is
added by the page's steps and nothing else; ``git status`` then lists exactly the paths the page
names, and the task registers, composes, passes pre-flight (which refuses another task's data),
evaluates and (slow) trains one GRPO step through the documented launcher. If a task ever needs
one more file or edit, a step here fails."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlvr.common import processes

ROOT = Path(__file__).resolve().parents[1]
TASK, MODEL = "parity", "tiny"
EXPERIMENT = f"{TASK}_{MODEL}"
#: The GRPO launcher, renamed in issue 39; the first that exists in the copy runs.
LAUNCHER = "scripts/train.sh"  # the documented one (docs/ADDING_A_TASK.md)
RUN_TIMEOUT_S = 900
# One xdist worker runs the module: the copy of the tree and its data are made once, not once
# per worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("adding_a_task")

REWARD = '''
"""Parity: say whether a number is even or odd, in answer tags. Standard library only."""

from rewards import _text

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
INSTRUCTION = "Is {n} even or odd? Answer with <answer>even</answer> or <answer>odd</answer>."


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    text = _text.as_text(solution_str)
    answer = _text.last_tagged(text, ANSWER_OPEN, ANSWER_CLOSE) if text is not None else None
    said = answer.strip().lower() if answer else None
    return {"score": float(said == ground_truth), "format": float(said in ("even", "odd"))}
'''

TASK_MODULE = '''
"""Parity: is a number even or odd (the example task of docs/ADDING_A_TASK.md)."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from rewards import parity as contract
from rlvr.common.paths import ROOT
from rlvr.data.prep import PrepResult, add_split_arguments, chat_prompt, split_options, write_splits
from rlvr.tasks.spec import TaskSpec

DATA_SOURCE = "parity"


def _row(number: int, split: str, index: int) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": chat_prompt(contract.INSTRUCTION.format(n=number)),
        "ability": "parity",
        "reward_model": {"style": "rule", "ground_truth": ("even", "odd")[number % 2]},
        "extra_info": {"split": split, "index": index},
    }


def prepare(local_dir: str | Path, train_size: int | None, test_size: int, seed: int) -> PrepResult:
    numbers = random.Random(seed).sample(range(100_000), (train_size or 64) + test_size)
    chosen = {"test": numbers[:test_size], "train": numbers[test_size:]}  # distinct: no overlap
    rows = {split: [_row(n, split, i) for i, n in enumerate(ns)] for split, ns in chosen.items()}
    paths = write_splits(local_dir, rows)
    counts = {split: len(r) for split, r in rows.items()}
    lines = [f"{split}: {counts[split]} rows -> {paths[split]}" for split in rows]
    return PrepResult(paths, counts, {}, rows["train"][0], lines)


def add_prep_arguments(parser: argparse.ArgumentParser) -> None:
    add_split_arguments(parser, test_default=16, train_help="train rows (default 64)",
                        test_help="test rows")


def prepare_from_args(args: argparse.Namespace) -> PrepResult:
    return prepare(args.local_dir, **split_options(args))


def offline_data(out: Path, train_rows: int, val_rows: int) -> None:
    prepare(out, train_rows, val_rows, seed=0)


SPEC = TaskSpec(
    name="parity",
    data_source=DATA_SOURCE,
    reward_file=ROOT / "rewards" / "parity.py",
    summary="Parity: say whether a number is even or odd.",
    add_prep_arguments=add_prep_arguments,
    prepare=prepare_from_args,
    offline_data=offline_data,
    default_experiment="parity_tiny",
)
'''

OVERLAY = """
# @package _global_
# Parity: data from python -m rlvr.tasks prep parity, graded by rewards/parity.py.
recipe:
  task: parity
data:
  train_files: ${paths.data}/parity/train.parquet
  val_files: ${paths.data}/parity/test.parquet
  filter_overlong_prompts: false
  truncation: error
custom_reward_function:
  path: ${paths.root}/rewards/parity.py
  name: compute_score
"""


def _git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    done = subprocess.run(["git", *identity, *args], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _copy_working_tree(dest: Path) -> None:
    """Tracked and untracked-but-not-ignored files of this tree, committed in a fresh repo."""
    listed = _git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "the working tree")


def _write(repo: Path, path: str, text: str) -> str:
    (repo / path).write_text(textwrap.dedent(text).lstrip())
    return path


def _register(registry: str) -> str:
    """The registry line of step 4: the module's import and its SPEC in SPECS."""
    importing = (r"^from rlvr\.tasks import (.+)$", rf"from rlvr.tasks import \1, {TASK}")
    registry, imports = re.subn(*importing, registry, count=1, flags=re.M)
    listing = (r"^(SPECS\b.*= \(\n)", rf"\1    {TASK}.SPEC,\n")
    registry, listed = re.subn(*listing, registry, count=1, flags=re.M)
    assert imports == listed == 1, "rlvr/tasks/__init__.py no longer has the documented shape"
    return registry


def add_the_task(repo: Path) -> list[str]:
    """docs/ADDING_A_TASK.md's five steps for ``parity``; the paths written, in order."""
    registry = repo / "rlvr/tasks/__init__.py"
    registry.write_text(_register(registry.read_text()))
    experiment = (repo / "configs/countdown_cpu.yaml").read_text()
    for old, new in (("task: countdown", f"task: {TASK}"), ("countdown_cpu", EXPERIMENT)):
        assert old in experiment, f"configs/countdown_cpu.yaml has no {old!r} to change"
        experiment = experiment.replace(old, new)
    return [
        _write(repo, f"rewards/{TASK}.py", REWARD),
        _write(repo, f"rlvr/tasks/{TASK}.py", TASK_MODULE),
        _write(repo, f"configs/task/{TASK}.yaml", OVERLAY),
        "rlvr/tasks/__init__.py",
        _write(repo, f"configs/{EXPERIMENT}.yaml", experiment),
    ]


def documented_paths(repo: Path) -> list[str]:
    """The numbered steps' paths in docs/ADDING_A_TASK.md, for this task and model."""
    page = (repo / "docs/ADDING_A_TASK.md").read_text()
    steps = re.findall(r"^\d+\. `([^`]+)`", page, re.M)
    named = [s.replace("math_qwen2_5_3b", EXPERIMENT).replace("math", TASK) for s in steps]
    return named


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    copy = tmp_path_factory.mktemp("repo")
    _copy_working_tree(copy)
    yield copy, add_the_task(copy)


def _env(copy: Path) -> dict[str, str]:
    """The copy's code first on the path (this tree's is installed editable), this tree's venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=str(copy), UV_PROJECT_ENVIRONMENT=str(ROOT / ".venv"))
    # The launchers sync first (scripts/lib/ensure_uv.sh); a sync from the copy would re-point
    # this tree's editable install at the copy, and every later test's Ray workers would import
    # the copy's rlvr. The venv is synced already: mark the copy as synced.
    env["RLVR_UV_SYNCED"] = str(copy)
    return env


def _python(copy: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=copy, env=_env(copy), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def test_the_task_is_the_documented_paths_and_nothing_else(repo: tuple[Path, list[str]]) -> None:
    copy, written = repo
    assert documented_paths(copy) == written  # the page's list is what the test had to write
    changed = sorted(line[3:] for line in _git(copy, "status", "--porcelain", "-uall").splitlines())
    assert changed == sorted(written)


def test_the_copy_runs_its_own_code(repo: tuple[Path, list[str]]) -> None:
    copy, _ = repo
    done = _python(copy, "-c", "import rlvr, rewards; print(rlvr.__file__, rewards.__file__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        str(copy / "rlvr/__init__.py"),
        str(copy / "rewards/__init__.py"),
    ]


@pytest.fixture(scope="module")
def data(repo: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The task's data, made by its own prep (``python -m rlvr.tasks prep parity``)."""
    copy, _ = repo
    folder = tmp_path_factory.mktemp("data")
    prep = _python(copy, "-m", "rlvr.tasks", "prep", TASK, "--local_dir", str(folder / TASK))
    assert prep.returncode == 0 and "example row:" in prep.stdout, prep.stderr
    return folder


# The commands a user of the new task runs, each as ``python -m MODULE ARGS`` runs it (runpy),
# in one interpreter of the copy: one start of torch and verl, not one per command.
COMMANDS = """
import io, json, runpy, sys
from contextlib import redirect_stderr, redirect_stdout

def run(module, *argv):
    out, err = io.StringIO(), io.StringIO()
    sys.argv = [module, *argv]
    with redirect_stdout(out), redirect_stderr(err):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else int(done.code is not None)
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}

from rlvr import tasks
from rlvr.config.compose import compose, validate

commands, report = json.loads(sys.argv[1]), sys.argv[2]
config = compose(commands.pop("compose")); validate(config)
done = {"composed": [tasks.for_config(config).name, config.custom_reward_function.path]}
done.update({name: run(*argv) for name, argv in commands.items()})
with open(report, "w") as f:
    json.dump(done, f)
"""


@pytest.fixture(scope="module")
def commands(
    repo: tuple[Path, list[str]], data: Path, tiny_model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:  # fmt: skip
    """Compose and verl's checks, then the registry's ``list``, pre-flight on the task's data,
    its eval, and pre-flight on Countdown data made by the registry's prep, in that order."""
    copy, _ = repo
    folder = tmp_path_factory.mktemp("commands")
    model = f"actor_rollout_ref.model.path={tiny_model_dir}"
    evaluate = ["--model_path", str(tiny_model_dir), "--data", str(data / TASK / "test.parquet")]
    evaluate += ["--limit", "4", "--max_tokens", "4", "--quiet", "--backend", "hf"]
    prep = ["prep", "countdown", "--source", "generate", "--train_size", "8", "--test_size", "4"]
    argv = {
        "compose": EXPERIMENT,
        "list": ["rlvr.tasks", "list"],
        "preflight": ["rlvr.preflight.checks", EXPERIMENT, f"paths.data={data}", model],
        "eval": ["rlvr.evaluation", TASK, *evaluate, "--output", str(folder / "eval"), "reward"],
        "countdown": ["rlvr.tasks", *prep, "--local_dir", str(folder / "other" / TASK)],
        "preflight_other": [
            "rlvr.preflight.checks", EXPERIMENT, f"paths.data={folder / 'other'}", model,
        ],
    }  # fmt: skip
    done = _python(copy, "-c", COMMANDS, json.dumps(argv), str(folder / "report.json"))
    assert done.returncode == 0, done.stderr
    return {**json.loads((folder / "report.json").read_text()), "folder": folder}


def test_the_task_registers_composes_and_passes_preflight(
    repo: tuple[Path, list[str]], commands: dict[str, Any]
) -> None:
    copy, _ = repo
    assert commands["composed"] == [TASK, f"{copy}/rewards/{TASK}.py"]
    assert commands["list"]["code"] == 0 and f"{TASK}: Parity" in commands["list"]["out"]
    preflight = commands["preflight"]
    assert preflight["code"] == 0, preflight["err"]
    assert f"pre-flight: {EXPERIMENT} ok (task {TASK}," in preflight["out"]


def test_eval_grades_with_the_tasks_reward(commands: dict[str, Any]) -> None:
    assert commands["eval"]["code"] == 0, commands["eval"]["err"]
    summary = json.loads((commands["folder"] / "eval" / "summary.json").read_text())
    assert summary["task"] == TASK and summary["prompts"] == 4


def test_preflight_refuses_another_tasks_data(commands: dict[str, Any]) -> None:
    """Countdown rows under the parity reward would all score 0, silently."""
    assert commands["countdown"]["code"] == 0, commands["countdown"]["err"]
    checked = commands["preflight_other"]
    assert checked["code"] == 2
    assert f"holds data_source ['countdown'], but the reward grades {TASK}" in checked["err"]


RECOMPOSE = f"""
from pathlib import Path
from rlvr.config import compose as c
overlay = c.CONFIG_DIR / "task" / "{TASK}.yaml"
text = overlay.read_text()
def train_file():
    return Path(c.compose("{EXPERIMENT}").data.train_files).name
first = c.compose("{EXPERIMENT}")
first.data.train_files = "elsewhere"  # the caller's copy only
sizes = [train_file()]
try:
    overlay.write_text(text.replace("train.parquet", "train2.parquet"))
    sizes.append(train_file())
    c._config_files_stamp = lambda task_dirs: ()  # negative control: the stamp frozen
    c.compose("{EXPERIMENT}")
    overlay.write_text(text.replace("train.parquet", "train3.parquet"))
    sizes.append(train_file())
finally:
    overlay.write_text(text)
print(sizes)
"""


def test_compose_sees_an_edited_overlay_and_hands_out_copies(
    repo: tuple[Path, list[str]],
) -> None:
    """compose() caches by the config files' stamps: an edited overlay composes anew and each
    caller gets its own copy; with the stamp frozen, the edit goes unseen."""
    copy, _ = repo
    done = _python(copy, "-c", RECOMPOSE)
    expected = ["train.parquet", "train2.parquet", "train2.parquet"]
    assert done.stdout.strip() == str(expected), done.stderr


def test_without_the_registry_line_preflight_names_the_missing_step(
    repo: tuple[Path, list[str]], tiny_model_dir: Path
) -> None:
    """Negative control: step 4 left out, the overlay names a task the registry lacks."""
    copy, _ = repo
    registry = copy / "rlvr/tasks/__init__.py"
    added = registry.read_text()
    registry.write_text(_git(copy, "show", "HEAD:rlvr/tasks/__init__.py"))
    try:
        run = [f"actor_rollout_ref.model.path={tiny_model_dir}"]
        checked = _python(copy, "-m", "rlvr.preflight.checks", EXPERIMENT, *run)
    finally:
        registry.write_text(added)
    assert checked.returncode == 2
    assert f"recipe.task: unknown task '{TASK}'; the tasks are" in checked.stderr
    assert "SPECS" in checked.stderr and "Traceback" not in checked.stderr


@pytest.mark.slow
@pytest.mark.no_cuda  # the CPU path
def test_the_new_task_trains_one_grpo_step_through_the_launcher(
    repo: tuple[Path, list[str]], data: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    copy, _ = repo
    launcher = LAUNCHER
    ray_tmp = tempfile.mkdtemp(prefix="rlvr-ray-", dir="/tmp")  # short: Ray's socket paths
    env = {**_env(copy), "RLVR_LOG_DIR": str(tmp_path / "logs"), "WANDB_MODE": "offline"}
    cmd = ["bash", launcher, EXPERIMENT, f"paths.data={data}"]
    cmd += [f"paths.checkpoints={tmp_path / 'checkpoints'}"]
    cmd += [f"actor_rollout_ref.model.path={tiny_model_dir}", "trainer.total_training_steps=1"]
    cmd += ["trainer.save_freq=-1", "trainer.test_freq=-1", "trainer.val_before_train=false"]
    cmd += [f"+ray_kwargs.ray_init._temp_dir={ray_tmp}"]
    try:
        done = processes.run_bounded(cmd, env, RUN_TIMEOUT_S, copy, tmp_path / "run.log")
        leftovers = processes.reap([ray_tmp])
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.output[-6000:]
    assert not leftovers, f"Ray processes left behind: {leftovers}"
    assert f"pre-flight: {EXPERIMENT} ok (task {TASK}," in done.output
    installed = subprocess.run(  # still this tree's editable install, not the copy's
        [sys.executable, "-c", "import rlvr; print(rlvr.__file__)"],
        cwd="/", env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert installed.stdout.strip() == str(ROOT / "rlvr" / "__init__.py"), installed
    assert re.search(r"step:1 - .*critic/score/mean:[-0-9.e]+", done.output), done.output[-4000:]

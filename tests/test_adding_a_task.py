"""docs/ADDING_A_TASK.md, proven: a task defined only in this file (reward, overlay, prep) goes
through data prep, pre-flight and eval with one registry call and no edit anywhere else."""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlvr import tasks
from rlvr.data.prep import PrepResult, chat_prompt, write_splits
from rlvr.evaluation import cli as eval_cli
from rlvr.preflight import checks as preflight
from rlvr.tasks import TaskSpec, prep_cli

WORDS = ["apple", "river", "stone", "cloud", "maple", "ember", "frost", "grain"]

REWARD = '''
"""Echo: the answer is the requested word. Standard library only, never raises."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    unknown = set(kwargs) - {"format_score"}
    if unknown:
        raise TypeError(f"unknown reward kwargs {sorted(unknown)}")
    words = str(solution_str or "").lower().split()
    hit = isinstance(ground_truth, str) and ground_truth in words
    return {"score": 1.0 if hit else 0.0, "format": float(bool(words))}
'''

OVERLAY = """
# @package _global_
data:
  train_files: ${paths.data}/echo/train.parquet
  val_files: ${paths.data}/echo/test.parquet
  max_prompt_length: 64
  max_response_length: 8
custom_reward_function:
  path: REWARD_PATH
  name: compute_score
  reward_kwargs:
    format_score: 0.0
"""


def _rows(split: str, count: int) -> list[dict]:
    return [
        {
            "data_source": "echo",
            "prompt": chat_prompt(f"Say the word {WORDS[i % len(WORDS)]}."),
            "ability": "echo",
            "reward_model": {"style": "rule", "ground_truth": WORDS[i % len(WORDS)]},
            "extra_info": {"split": split, "index": i},
        }
        for i in range(count)
    ]


def _prepare(args: argparse.Namespace) -> PrepResult:
    rows = {"train": _rows("train", args.size), "test": _rows("test", 4)}
    paths = write_splits(args.local_dir, rows)
    counts = {split: len(r) for split, r in rows.items()}
    return PrepResult(paths, counts, {}, rows["train"][0], [f"{counts} -> {args.local_dir}"])


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=8, help="train rows")


@pytest.fixture
def echo_task(tmp_path: Path) -> Iterator[TaskSpec]:
    reward = tmp_path / "echo_reward.py"
    reward.write_text(textwrap.dedent(REWARD))
    overlay = tmp_path / "configs" / "task" / "echo.yaml"
    overlay.parent.mkdir(parents=True)
    overlay.write_text(OVERLAY.replace("REWARD_PATH", str(reward)))
    spec = TaskSpec(
        name="echo",
        data_source="echo",
        reward_file=reward,
        summary="Echo: repeat the requested word.",
        add_prep_arguments=_add_arguments,
        prepare=_prepare,
        offline_data=lambda out, train, val: None,
        default_experiment="countdown_cpu",
        config_dir=tmp_path / "configs",
    )
    tasks.register(spec)  # the one registry line
    yield spec
    tasks.unregister("echo")


def test_a_task_defined_here_runs_prep_preflight_and_eval(
    echo_task: TaskSpec, tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    data = tmp_path / "data"
    assert prep_cli.main("echo", ["--local_dir", str(data / "echo"), "--size", "6"]) == 0
    assert "example row:" in capsys.readouterr().out

    run = [
        "countdown_cpu",
        "task=echo",
        f"paths.data={data}",
        f"paths.checkpoints={tmp_path / 'checkpoints'}",
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        # countdown_cpu states Countdown's reward credit itself (its own literals win over the
        # task overlay); echo's reward takes no shaping
        "~custom_reward_function.reward_kwargs.shaping",
    ]
    assert preflight.main(run) == 0
    assert "task echo" in capsys.readouterr().out

    out = tmp_path / "eval"
    argv = ["--model_path", str(tiny_model_dir), "--data", str(data / "echo/test.parquet")]
    argv += ["--max_tokens", "4", "--quiet", "--backend", "hf", "--output", str(out), "reward"]
    assert eval_cli.main("echo", "echo eval", argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "echo" and summary["prompts"] == 4
    assert summary["reward_kwargs"] == {"format_score": 0.0}  # from the task's own overlay


def test_preflight_refuses_another_tasks_data(
    echo_task: TaskSpec, tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    """Negative control: Countdown rows under the echo reward would all score 0, silently."""
    from rlvr.tasks.countdown import prepare

    prepare("generate", tmp_path / "data" / "echo", train_size=8, test_size=4)
    run = ["countdown_cpu", "task=echo", f"paths.data={tmp_path / 'data'}"]
    run += [f"actor_rollout_ref.model.path={tiny_model_dir}"]
    assert preflight.main(run) == 2
    assert "holds data_source ['countdown'], but the reward grades echo" in capsys.readouterr().err


def test_unknown_task_lists_the_registered_ones() -> None:
    with pytest.raises(tasks.TaskError, match=r"unknown task 'math'; the tasks are \['countdown'"):
        tasks.get("math")


def test_compose_sees_an_edited_overlay_and_hands_out_copies(
    echo_task: TaskSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compose() caches by the config files' stamps: an edited overlay composes anew, and each
    caller gets its own copy. Negative control: with the stamp frozen, the edit goes unseen."""
    from rlvr.train import config as config_module

    overlay = echo_task.config_dir / "task" / "echo.yaml"
    first = config_module.compose("countdown_cpu", ["task=echo"])
    assert first.data.train_files.endswith("echo/train.parquet")
    first.data.train_files = "elsewhere"  # the caller's copy only
    assert config_module.compose("countdown_cpu", ["task=echo"]).data.train_files.endswith(
        "echo/train.parquet"
    )
    overlay.write_text(overlay.read_text().replace("echo/train.parquet", "echo/train2.parquet"))
    assert config_module.compose("countdown_cpu", ["task=echo"]).data.train_files.endswith(
        "echo/train2.parquet"
    )
    monkeypatch.setattr(config_module, "_config_files_stamp", lambda task_dirs: ())
    config_module.compose("countdown_cpu", ["task=echo"])
    overlay.write_text(overlay.read_text().replace("echo/train2.parquet", "echo/train3.parquet"))
    stale = config_module.compose("countdown_cpu", ["task=echo"])
    assert stale.data.train_files.endswith("echo/train2.parquet")

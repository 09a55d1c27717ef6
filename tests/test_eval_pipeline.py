"""One model eval reads as its pipeline: the stages ``run_model_command`` and ``evaluate`` call,
traced while a real eval (the tiny model, generated Countdown data) runs, in order."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from rlvr.evaluation import cli as eval_cli
from rlvr.evaluation import pipeline

EVALUATION = Path(pipeline.__file__).parent


def stage_calls(run: Callable[[], Any], callers: set[str]) -> list[str]:
    """``module.function`` of each call that a function named in ``callers`` makes into an
    evaluation module while ``run`` runs (comprehensions and lambdas left out)."""
    calls: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        code, caller = frame.f_code, frame.f_back
        while caller is not None and caller.f_code.co_filename == contextlib.__file__:
            caller = caller.f_back  # a @contextmanager's body runs from contextlib's __enter__
        if event != "call" or caller is None or caller.f_code.co_name not in callers:
            return
        if Path(code.co_filename).parent == EVALUATION and not code.co_name.startswith("<"):
            calls.append(f"{Path(code.co_filename).stem}.{code.co_name}")

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def stays(calls: list[str]) -> list[str]:
    """The modules in the order they are entered, one entry per consecutive stay."""
    modules = [call.split(".")[0] for call in calls]
    return [m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m]


@pytest.mark.parametrize("command", ["reward", "passk", "analyse"])
def test_a_model_eval_enters_each_stage_once_in_order(
    command: str, tmp_path: Path, countdown_data: Path, tiny_model_dir: Path
) -> None:
    argv = [command, "--model_path", str(tiny_model_dir), "--data", str(countdown_data)]
    argv += ["--limit", "2", "--max_tokens", "4", "--quiet", "--output", str(tmp_path / "run")]
    argv += [] if command == "reward" else ["--n", "2", "--temperature", "1.0"]
    outer = stage_calls(lambda: eval_cli.main("countdown", "t", argv), {"run_model_command"})
    assert stays(outer) == ["settings", "model", "run_folder", "prompts", "generation", "pipeline"]
    assert outer[-1] == "pipeline.evaluate"
    inner = stage_calls(lambda: eval_cli.main("countdown", "t", [*argv, "--force"]), {"evaluate"})
    # evaluate checks its own inputs (it is called directly too), stages the folder, then runs
    # grading, statistics and the writer; the staging context's exit is the folder's publication
    assert stays(inner) == [
        "settings", "run_folder", "grading", "statistics", "records", "run_folder"
    ]  # fmt: skip
    assert ("grading.model_checks" in inner) == (command == "analyse")


def test_a_stage_entered_twice_is_seen() -> None:
    """Negative control: a caller that goes back to a module it left shows two stays of it."""
    from rlvr.evaluation import generation, settings

    def flip() -> None:
        settings.default_ks(4)
        settings.default_ks(8)
        generation.prompts_per_chunk("hf", 16, 4)
        settings.default_ks(4)

    assert stays(stage_calls(flip, {"flip"})) == ["settings", "generation", "settings"]

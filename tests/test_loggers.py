"""rlvr/report/loggers.py: verl 0.6.1's file logger fixed (what writes metrics.jsonl for both
launch paths), with a negative control (verl's own logger fails on a real step) and a guard
against a changed verl."""

from __future__ import annotations

import json
import math
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from verl.utils import tracking

from rlvr.report import loggers
from rlvr.report.loggers import file_logger_fixed, fixed_file_logger
from rlvr.report.metrics_log import read_steps

# What verl 0.6.1 logs on a CPU training step, by type: trainer.balance_batch's
# log_seqlen_unbalance gives 0-d torch tensors (int64, and float32 for the mean), reduce_metrics
# np.float64 (a float subclass: fine), and validation can give np.float32 (Agent-R1 issue 83).
VERL_STEP: dict[str, Any] = {
    "global_seqlen/min": torch.tensor(20520328),
    "global_seqlen/mean": torch.tensor(20520328.0),
    "actor/pg_loss": np.float64(-0.5),
    "val-core/countdown/acc/mean@1": np.float32(0.25),
    "actor/grad_norm": float("nan"),
    "training/global_step": 1,
}


def test_verls_own_file_logger_fails_on_a_real_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: verl 0.6.1's FileLogger raises on a real step's metrics (its bare
    json.dumps) and cannot open a VERL_FILE_LOGGER_PATH in a new folder."""
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "raw.jsonl"))
    logger = tracking.FileLogger("p", "e")
    with pytest.raises(TypeError, match="Tensor is not JSON serializable"):
        logger.log(data=VERL_STEP, step=1)
    logger.finish()
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "new/raw.jsonl"))
    with pytest.raises(FileNotFoundError):
        tracking.FileLogger("p", "e")


def test_fixed_file_logger_writes_plain_numbers_flushed_and_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "new/folder/metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger_class = fixed_file_logger(tracking.FileLogger)
    logger = logger_class("p", "e")
    logger.log(data=VERL_STEP, step=1)
    assert path.read_text().count("\n") == 1  # flushed: a run that dies keeps it
    logger.finish()
    resumed = logger_class("p", "e")  # a resumed run appends
    resumed.log(data={"critic/score/mean": np.float32(0.5)}, step=2)
    resumed.finish()
    text = path.read_text()
    assert '"global_seqlen/min": 20520328,' in text  # an int, as the tensor held
    assert '"actor/grad_norm": NaN' in text
    one, two = read_steps(path)
    assert (one.step, two.step) == (1, 2)
    assert one.metrics["global_seqlen/mean"] == 20520328.0
    assert one.metrics["val-core/countdown/acc/mean@1"] == 0.25
    assert math.isnan(one.metrics["actor/grad_norm"]) and two.metrics == {"critic/score/mean": 0.5}


TORN = '{"step": 1, "data": {"a": 1.0}}\n{"step": 2, "data": {"a": 2.0}}\n{"step": 3, "da'


def test_a_resumed_run_cuts_the_torn_line_a_killed_one_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run killed mid-write leaves a last line without its newline; appending the resumed
    run's step 3 to it glued the two into a line no reader takes (negative control, below)."""
    path = tmp_path / "metrics.jsonl"
    path.write_text(TORN)
    with path.open("a") as handle:  # what an append-only logger does
        handle.write('{"step": 3, "data": {"a": 3.0}}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:3: not a step record"):
        read_steps(path)
    path.write_text(TORN)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = fixed_file_logger(tracking.FileLogger)("p", "e")
    logger.log(data={"a": 3.0}, step=3)
    logger.finish()
    assert [(r.step, r.metrics) for r in read_steps(path)] == [
        (i, {"a": float(i)}) for i in (1, 2, 3)
    ]
    assert f"dropped a torn last line (15 bytes) of {path}" in capsys.readouterr().out


def test_file_logger_fix_refuses_a_changed_verl() -> None:
    class FileLogger:  # a later verl's logger with another log signature
        def __init__(self, project_name: str, experiment_name: str) -> None: ...
        def log(self, data: dict, step: int, commit: bool = True) -> None: ...
        def finish(self) -> None: ...

    with pytest.raises(RuntimeError, match=r"FileLogger\.log.*update rlvr/report/loggers\.py"):
        fixed_file_logger(FileLogger)


def test_within_the_context_verls_tracking_builds_the_fixed_logger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verl's own Tracking, built within, writes a real step; verl's logger is back after."""
    path = tmp_path / "run/metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    verls = tracking.FileLogger
    with file_logger_fixed():
        built = tracking.Tracking("p", "e", default_backend=["file"])
    assert tracking.FileLogger is verls
    built.log(data=VERL_STEP, step=1)
    built.logger["file"].finish()
    assert [r.step for r in read_steps(path)] == [1]


def test_plain_json_refuses_what_it_cannot_turn_into_numbers() -> None:
    assert json.dumps(np.arange(3), default=loggers.plain_json) == "[0, 1, 2]"
    with pytest.raises(TypeError, match="SimpleNamespace is not JSON serializable"):
        json.dumps(types.SimpleNamespace(), default=loggers.plain_json)

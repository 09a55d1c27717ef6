"""Real verl + Ray on CPU with the tiny model, 2 steps, for the presets whose verl code path
differs most from grpo's: dapo (verl's DAPO reward manager with the overlong penalty, our reward
called through it) and tuft_is (the vanilla loss with clip ratios that never bind).

Slow (about 2.5 minutes a run on 2 cores); CI runs it. Each run has a hard timeout and its own
Ray temp dir, exactly as tests/test_train_e2e.py launches countdown_cpu.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import countdown_workdir, cpu_launch, run_bounded

from rlvr.report.metrics_log import StepRecord, read_steps

RUN_TIMEOUT_S = 900
pytestmark = [pytest.mark.slow, pytest.mark.no_cuda]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return countdown_workdir(tmp_path_factory, "objectives", train_size=8, test_size=4)


@pytest.fixture
def ray_tmp() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="rlvr-obj-", dir="/tmp")  # Ray socket paths stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _two_steps(
    work: Path, ray_tmp: str, objective: str, *overrides: str
) -> tuple[str, list[StepRecord]]:
    name = f"obj_{objective}"
    cmd, env = cpu_launch(work, name)
    cmd += [
        f"objective={objective}",
        *overrides,
        "trainer.total_training_steps=2",
        "trainer.save_freq=-1",  # no checkpoint: test_train_e2e covers them
        f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
    ]
    output = run_bounded(cmd, env, RUN_TIMEOUT_S, ray_tmp)
    records = read_steps(work / f"checkpoints/{name}/metrics.jsonl")
    assert [r.step for r in records] == [0, 1, 2]
    for record in records[1:]:
        assert math.isfinite(record.metrics["actor/pg_loss"])
    return output, records


def test_dapo_two_steps(workdir: Path, ray_tmp: str) -> None:
    # countdown_cpu answers in 48 tokens: the last fifth is DAPO's buffer (objective/dapo.yaml)
    buffer = "reward_model.reward_kwargs.overlong_buffer_cfg.len=9"
    output, records = _two_steps(workdir, ray_tmp, "dapo", buffer)
    assert "'reward_manager': 'dapo'" in output
    # the random model runs to max_response_length: the whole overlong penalty (-1) applies
    assert records[1].metrics["critic/score/mean"] < 0
    assert "actor/kl_loss" not in records[1].metrics  # DAPO has no KL term


def test_tuft_is_two_steps(workdir: Path, ray_tmp: str) -> None:
    _, records = _two_steps(workdir, ray_tmp, "tuft_is")
    for record in records[1:]:
        # the clip ratios never bind
        assert record.metrics["actor/pg_clipfrac"] == 0
        assert record.metrics["actor/pg_clipfrac_lower"] == 0
        assert "actor/kl_loss" not in record.metrics

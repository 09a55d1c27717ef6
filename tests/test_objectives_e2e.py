"""Real verl + Ray on CPU with the tiny model, 2 steps, for the presets whose verl code path
differs most from grpo's: dapo (verl's DAPO reward manager with the overlong penalty, our reward
called through it), tuft_is (the vanilla loss with clip ratios that never bind) and gspo (verl's
sequence-level loss, with the paper's four mini batches so that its tiny clip range can bind).

Slow (about 2.5 minutes a run on 2 cores); CI runs it. Each run has a hard timeout and its own
Ray temp dir, exactly as tests/test_train_e2e.py launches countdown_cpu.
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import countdown_workdir, cpu_launch, run_bounded

from rlvr.report.metrics_log import StepRecord, read_steps

ROOT = Path(__file__).resolve().parents[1]
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


# Ray relays each worker line as "<color>(Actor pid=N)<reset> text" (the color codes optional
# here); under load its log monitor can read a line half-written and relay it as two (seen in
# CI: "'loss_mode': " then "'gspo',").
RAY_LINE_START = re.compile(r"\n?(?:\x1b\[\d+m)?\([^()\n]* pid=\d+[^()\n]*\)(?:\x1b\[0m)? ")


def worker_text(output: str) -> str:
    """What the workers printed as one stream: Ray's line prefixes, and the line breaks before
    them, removed, so that a line Ray relayed in two pieces reads whole again."""
    return RAY_LINE_START.sub("", output)


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
    output = worker_text(run_bounded(cmd, env, RUN_TIMEOUT_S, ray_tmp))
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


def test_gspo_two_steps(workdir: Path, ray_tmp: str) -> None:
    """GSPO as its paper trains (arXiv 2507.18071, Sec. 5.1): four mini batches per rollout
    batch, so the three after the first see a moved policy and the clip range 3e-4 / 4e-4 binds.
    A reward with spread in every group (tests/learning_reward.py) and a large step make the
    sequence-level ratios leave that range; with one mini batch they are exactly 1."""
    output, records = _two_steps(
        workdir,
        ray_tmp,
        "gspo",
        f"custom_reward_function.path={ROOT}/tests/learning_reward.py",
        "data.train_batch_size=4",  # the fixture's 8 prompts: one epoch over 2 steps
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",  # prompts: 4 mini batches of 4
        "actor_rollout_ref.actor.optim.lr=1e-2",
    )
    # verl's printed config: the loss mode and the paper's clip range reached the trainer
    assert "'loss_mode': 'gspo'" in output
    assert "'clip_ratio_low': 0.0003" in output and "'clip_ratio_high': 0.0004" in output
    for record in records[1:]:
        metrics = record.metrics
        assert metrics["critic/advantages/max"] > 0  # a signal for the loss to clip
        assert metrics["actor/pg_clipfrac"] > 0  # the off-policy mini batches clip
        assert metrics["actor/pg_clipfrac_lower"] == 0  # verl's gspo has no dual clip
        assert "actor/kl_loss" not in metrics  # no KL term
        if metrics["response_length/min"] == metrics["response_length/max"]:
            # Equal lengths: the clipped token share (a mean over the 4 mini batches, one micro
            # batch each) is a whole number of the 16 responses, since a response clips whole;
            # token-level clipping would land on one about 1 time in 48. (With the seeded
            # sampling here, step 2's responses all ran to 48 tokens: 7 of 16 clipped.)
            responses = metrics["actor/pg_clipfrac"] * 16
            assert responses == pytest.approx(round(responses), abs=1e-6), metrics


def test_a_line_ray_relayed_in_two_pieces_reads_whole() -> None:
    """The CI log's own split (tests/test_objectives_e2e.py failed on it once), and a control."""
    prefix = "\x1b[36m(RecipeTaskRunner pid=4223)\x1b[0m "
    split = f"{prefix}  'policy_loss': {{'loss_mode': \n{prefix}'gspo',\n{prefix}  'ppo_epochs': 1"
    assert "'loss_mode': 'gspo'" not in split  # the negative control: as Ray relayed it
    assert "'loss_mode': 'gspo'" in worker_text(split)
    assert worker_text("plain\nlines") == "plain\nlines"  # the launcher's own lines stay
    uncoloured = "(TaskRunner pid=7) 'loss_mode': \n(TaskRunner pid=7) 'gspo',"
    assert "'loss_mode': 'gspo'" in worker_text(uncoloured)

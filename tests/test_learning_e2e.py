"""Real verl + Ray GRPO on CPU must learn: a short run raises the mean reward, and the same run
with learning broken does not.

The tiny random model (rlvr/models/tiny.py) is trained on Countdown prompts against a test-only
reward (tests/learning_reward.py: the share of digit characters in the response), which it
scores about 0.3 on at random, with spread inside every group. ``learned`` compares the first
and last steps' ``critic/score/mean`` from the run's metrics.jsonl. The negative control is the
same run whose rollout never receives the actor's new weights (``RLVR_TEST_FREEZE_ROLLOUT=1``,
read by ``rlvr.cpu.rollout.HFSyncRollout.update_weights``): the actor still takes its optimizer
steps, but the responses that are scored keep coming from the initial model, so the same check
must fail. verl's GPU CI guards learning the same way.

Slow (two launches, a few minutes on 2 cores); CI runs it. Each run has a hard timeout, its own
process group and its own Ray temp dir.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path

import pytest
from conftest import countdown_workdir, cpu_launch, run_bounded

from rlvr.report.metrics_log import read_steps

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 600
STEPS = 16
WINDOW = 3  # steps averaged at each end of the run
# The least rise of the mean reward that counts as learning. Measured on 2 cores (window means,
# last minus first): learning runs rose 0.40-0.52 (7 runs, about 0.30 -> 0.70-0.81; sd 0.04),
# frozen rollouts moved -0.03 to +0.03 (5 runs; sd 0.02): 0.15 is 7-8 sd from either.
MARGIN = 0.15
pytestmark = [pytest.mark.slow, pytest.mark.no_cuda]  # the CPU path


def learned(scores: list[float]) -> bool:
    """The mean reward of the last ``WINDOW`` steps beats that of the first by ``MARGIN``."""
    assert len(scores) >= 2 * WINDOW, scores
    return statistics.mean(scores[-WINDOW:]) - statistics.mean(scores[:WINDOW]) > MARGIN


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # one epoch must cover every step: verl stops at the end of the last epoch
    return countdown_workdir(tmp_path_factory, "learning", train_size=64, test_size=4)


def _train(work: Path, name: str, extra: list[str]) -> list[dict[str, float]]:
    """One GRPO run; its per-step metrics, read from its metrics.jsonl."""
    ray_tmp = tempfile.mkdtemp(prefix="rlvr-ray-", dir="/tmp")  # short: socket paths < 108
    cmd, env = cpu_launch(work, name)
    cmd += [
        f"custom_reward_function.path={ROOT}/tests/learning_reward.py",
        f"trainer.total_training_steps={STEPS}",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.logger=[console,file]",
        # a step: 4 prompts x 8 responses of at most 16 tokens, one optimizer step (~1.6 s)
        "data.train_batch_size=4",
        "data.max_response_length=16",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        # the random tiny model needs it: at 1e-3, 12 steps only moved the reward 0.28 -> 0.33
        "actor_rollout_ref.actor.optim.lr=1e-2",
        f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
        *extra,
    ]
    try:
        run_bounded(cmd, env, RUN_TIMEOUT_S, ray_tmp)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    records = read_steps(work / f"checkpoints/{name}/metrics.jsonl")
    assert [r.step for r in records] == list(range(1, STEPS + 1)), records
    return [r.metrics for r in records]


def test_grpo_raises_the_reward_and_a_frozen_rollout_does_not(workdir: Path) -> None:
    runs = {
        "trained": _train(workdir, "learns", []),
        "frozen": _train(
            workdir,
            "frozen_rollout",
            ["++ray_kwargs.ray_init.runtime_env.env_vars.RLVR_TEST_FREEZE_ROLLOUT='1'"],
        ),
    }
    # both actors took a real optimizer step every step: only the weight sync differs
    for name, steps in runs.items():
        assert all(step["actor/grad_norm"] > 0 for step in steps), name
    scores = {name: [step["critic/score/mean"] for step in steps] for name, steps in runs.items()}
    curves = "\n".join(f"{name}: {[round(s, 3) for s in v]}" for name, v in scores.items())
    print(curves)
    assert learned(scores["trained"]), f"GRPO did not raise the mean reward by {MARGIN}\n{curves}"
    assert not learned(scores["frozen"]), f"the check passed with learning broken\n{curves}"

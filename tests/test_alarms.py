"""Each health alarm (rlvr/report/alarms/) must fire on its case and stay quiet on a healthy
one; and the tasks' reward-hacking patterns the hacking alarm matches.

Fixtures (tests/data/report/): quickstart_smollm2/ and bench3/ are real recorded metrics;
countdown_run/ and gsm8k_run/ are constructed in verl's formats by make_fixtures.py there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from rlvr.report import alarms
from rlvr.report.alarms import FIRED, NO_DATA, OK
from rlvr.report.metrics_log import StepRecord
from rlvr.report.records import Rollout, RunRecords, group_stats, load_run, zero_spread_series
from rlvr.tasks import countdown, gsm8k
from rlvr.tasks.spec import TaskSpec

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "report"


def records(
    metrics: Mapping[str, Sequence[float]],
    val: Mapping[int, float] | None = None,
    rollouts: Mapping[int, Sequence[Rollout]] | None = None,
    task: TaskSpec | None = None,
) -> RunRecords:
    """Constructed records: ``metrics[key][i]`` is logged at training step i + 1; ``val`` maps
    a step to val-core/countdown/acc/mean@1 (step 0 holds only validation)."""
    steps: dict[int, dict[str, float]] = {}
    for key, values in metrics.items():
        for i, value in enumerate(values):
            steps.setdefault(i + 1, {})[key] = value
    for step, value in (val or {}).items():
        steps.setdefault(step, {})["val-core/countdown/acc/mean@1"] = value
    logged = tuple(StepRecord(step, data) for step, data in sorted(steps.items()))
    dumped = {step: tuple(rs) for step, rs in (rollouts or {}).items()}
    return RunRecords(Path("run"), logged, dumped, task)


def real(name: str) -> RunRecords:
    return load_run(DATA / name)


def group(step: int, prompt: str, scores: Sequence[float], output: str = "x") -> list[Rollout]:
    return [Rollout(step, prompt, output, score) for score in scores]


# --- entropy collapse -------------------------------------------------------------------------


def test_entropy_collapse_fires_on_the_recorded_quickstart() -> None:
    alarm = alarms.entropy_collapse(real("quickstart_smollm2"))  # 1.18 -> 0.26 -> 0.22 -> 0.12
    assert alarm.status == FIRED and alarm.steps == (3, 4)


def test_entropy_collapse_stays_quiet_on_a_recorded_run_whose_entropy_rose() -> None:
    assert alarms.entropy_collapse(real("bench3")).status == OK  # 1.94 -> 2.54


def test_entropy_below_the_absolute_floor_fires_even_from_a_low_start() -> None:
    low = records({alarms.ENTROPY: [0.012, 0.011, 0.011, 0.005]})
    assert alarms.entropy_collapse(low).steps == (4,)
    steady = records({alarms.ENTROPY: [0.3, 0.25, 0.3, 0.28]})
    assert alarms.entropy_collapse(steady).status == OK
    assert alarms.entropy_collapse(records({})).status == NO_DATA


# --- zero-spread groups -----------------------------------------------------------------------


def _steps_of_four(constant_per_step: Sequence[int]) -> dict[int, list[Rollout]]:
    """Steps of 4 groups of 4 (a CPU batch): the first ``k`` groups of a step agree."""
    dumps = {}
    for step, k in enumerate(constant_per_step, start=1):
        dumps[step] = [
            *(r for i in range(k) for r in group(step, f"s{step}p{i}", [0.1] * 4)),
            *(r for i in range(k, 4) for r in group(step, f"s{step}p{i}", [0, 1, 0.1, 0])),
        ]
    return dumps


def test_zero_spread_fires_when_most_groups_score_alike() -> None:
    dumps = _steps_of_four([3] * 8)  # 75% at every step
    alarm = alarms.zero_spread_groups(records({}, rollouts=dumps))
    assert alarm.status == FIRED and alarm.steps == (8,)  # the first window of 32 groups
    assert group_stats(dumps[1]).share == 0.75 and "0.1" in alarm.detail


def test_zero_spread_stays_quiet_when_half_the_groups_disagree() -> None:
    dump = [*(r for i in range(16) for r in group(5, f"p{i}", [0, 0, 0, 0]))]
    dump += [*(r for i in range(16) for r in group(5, f"q{i}", [0, 1, 0, 0]))]
    assert alarms.zero_spread_groups(records({}, rollouts={5: dump})).status == OK


def test_zero_spread_judges_small_batches_over_a_window_not_one_step() -> None:
    """4-group steps move in quarters: a run at 40% zero spread has steps at 75% by chance. The
    alarm judged each step alone and fired (the old rule, kept as the negative control); pooled
    over 32 groups the run is under half."""
    dumps = _steps_of_four([3, 1, 2, 1, 3, 1, 2, 1, 1, 1])
    assert max(group_stats(d).share for d in dumps.values()) > alarms.ZERO_SPREAD_MAX
    assert alarms.zero_spread_groups(records({}, rollouts=dumps)).status == OK
    assert alarms.zero_spread_groups(records({}, rollouts={1: dumps[1]})).status == NO_DATA


def test_zero_spread_reads_an_all_equal_batch_from_the_recorded_metrics() -> None:
    # quickstart steps 3 and 4: critic/score/min == max == 0.1 (every response at the format score)
    run = real("quickstart_smollm2")
    assert zero_spread_series(run) == [(3, 1.0, "metrics"), (4, 1.0, "metrics")]
    alarm = alarms.zero_spread_groups(run)
    assert alarm.steps == (3, 4) and "0.1" in alarm.detail
    # bench3 step 3: every response scored 0 (grad norm 0.018); its other steps are unknown
    assert alarms.zero_spread_groups(real("bench3")).steps == (3,)
    # its dumps hold fewer than MIN_JUDGED_GROUPS groups in all: too few to judge
    assert alarms.zero_spread_groups(real("countdown_run")).status == NO_DATA


# --- response length --------------------------------------------------------------------------


def test_length_collapse_fires_when_responses_lose_most_tokens() -> None:
    run = records({alarms.LENGTH: [200, 210, 190, 150, 45]})
    alarm = alarms.length_collapse(run)
    assert alarm.status == FIRED and alarm.steps == (5,)
    healthy = records({alarms.LENGTH: [200, 210, 190, 150, 160]})
    assert alarms.length_collapse(healthy).status == OK
    assert alarms.length_collapse(records({alarms.LENGTH: [200, 10]})).status == NO_DATA


def test_length_runaway_fires_on_growth_and_on_clipped_responses() -> None:
    grows = records({alarms.LENGTH: [100, 110, 105, 250, 400]})
    assert alarms.length_runaway(grows).steps == (5,)
    clipped = records({alarms.LENGTH_CLIP: [0.0, 0.02, 0.3]})
    assert alarms.length_runaway(clipped).steps == (3,)
    healthy = records({alarms.LENGTH: [100, 110, 105, 250, 300], alarms.LENGTH_CLIP: [0.05] * 5})
    assert alarms.length_runaway(healthy).status == OK


def test_length_runaway_reads_the_recorded_quickstart_clip_ratio() -> None:
    # max_response_length 32: 41% of the first step's responses were cut
    assert alarms.length_runaway(real("quickstart_smollm2")).steps == (1,)


# --- PPO clip ratio ---------------------------------------------------------------------------


def test_pg_clipfrac_fires_above_its_limit_only() -> None:
    assert alarms.pg_clip_high(records({alarms.PG_CLIPFRAC: [0.01, 0.15, 0.02]})).steps == (2,)
    assert alarms.pg_clip_high(records({alarms.PG_CLIPFRAC: [0.01, 0.03, 0.09]})).status == OK
    assert alarms.pg_clip_high(real("quickstart_smollm2")).status == OK  # recorded: 0.0


# --- grad norm --------------------------------------------------------------------------------


def test_grad_norm_spike_fires_against_the_recent_median() -> None:
    run = records({alarms.GRAD_NORM: [0.1, 0.12, 0.09, 0.11, 0.8, 0.1]})
    assert alarms.grad_norm_spikes(run).steps == (5,)
    assert alarms.grad_norm_spikes(
        records({alarms.GRAD_NORM: [0.1, 0.1, 0.1, math.nan]})
    ).steps == (4,)


def test_grad_norm_stays_quiet_on_recorded_runs_with_zero_norm_steps() -> None:
    # recorded: 3.5, 1.7, 0.019, 0.02 and 7.1, 3.9, 0.018, 3.6, 2.7, 4.0; zero-signal batches
    # (grad norm 0) are no level to spike against
    assert alarms.grad_norm_spikes(real("quickstart_smollm2")).status == OK
    assert alarms.grad_norm_spikes(real("bench3")).status == OK
    zeros = records({alarms.GRAD_NORM: [0.0, 0.0, 0.0, 0.0, 2.0, 2.1, 1.9, 2.2]})
    assert alarms.grad_norm_spikes(zeros).status == OK


# --- validation vs training -------------------------------------------------------------------


def test_validation_divergence_fires_when_validation_falls_while_training_rises() -> None:
    rising = {alarms.SCORE: [0.1 + 0.05 * i for i in range(12)]}
    alarm = alarms.validation_divergence(records(rising, {0: 0.2, 4: 0.35, 8: 0.32, 12: 0.25}))
    assert alarm.status == FIRED and alarm.steps == (12,)  # 8 fell 0.03: within noise
    assert "step 4" in alarm.detail


def test_validation_divergence_stays_quiet_when_both_move_together() -> None:
    rising = {alarms.SCORE: [0.1 + 0.05 * i for i in range(12)]}
    falling = {alarms.SCORE: [0.7 - 0.05 * i for i in range(12)]}
    together = {0: 0.2, 4: 0.35, 8: 0.3, 12: 0.25}
    assert alarms.validation_divergence(records(falling, together)).status == OK
    assert alarms.validation_divergence(records(rising, {0: 0.2, 6: 0.3, 12: 0.4})).status == OK
    assert alarms.validation_divergence(records(rising, {0: 0.2})).status == NO_DATA


# --- reward hacking ---------------------------------------------------------------------------


def test_reward_hacking_fires_on_the_constructed_countdown_and_gsm8k_dumps() -> None:
    for name, task in (("countdown_run", "countdown"), ("gsm8k_run", "gsm8k")):
        run = real(name)
        assert run.task is not None and run.task.name == task  # from val-core/<data_source>/
        alarm = alarms.reward_hacking(run)
        assert alarm.status == FIRED and alarm.steps == (8, 12), (name, alarm)
        assert alarm.examples


def test_reward_hacking_stays_quiet_on_clean_or_unrewarded_responses() -> None:
    run = real("countdown_run")
    clean = {step: rs for step, rs in run.rollouts.items() if step == 4}  # before the hacks
    assert alarms.reward_hacking(records({}, rollouts=clean, task=run.task)).status == OK
    unrewarded = {
        step: [Rollout(r.step, r.prompt, r.response, 0.0) for r in rs]
        for step, rs in run.rollouts.items()
    }
    assert alarms.reward_hacking(records({}, rollouts=unrewarded, task=run.task)).status == OK
    assert alarms.reward_hacking(records({}, rollouts=run.rollouts)).status == NO_DATA  # no task


def test_a_response_counts_as_reinforced_only_above_its_groups_mean() -> None:
    """verl's GRPO advantage is positive above the group's mean; a group of one has baseline 0."""
    rollouts = [
        *group(1, "a", [0.0, 0.1, 1.0, 0.1]),
        *group(1, "b", [0.1] * 4),
        *group(1, "c", [1.0]),
        *group(1, "d", [0.0]),
    ]
    reinforced = [(r.prompt, r.score) for r in alarms.above_group_mean(rollouts)]
    assert reinforced == [("a", 1.0), ("c", 1.0)]


def test_reward_hacking_fires_once_a_loophole_fills_whole_groups() -> None:
    """Every response of its groups hacks: none is above its group's mean any more, but half the
    rewarded responses match, and it fires; below half, it does not."""
    task = countdown.SPEC
    copied = "<answer>(1 + 2) / 3</answer>"  # the prompt's own example
    spread = {3: [*group(3, COUNTDOWN_PROMPT, [0.1] * 4, copied), *group(3, "p", [0.1, 0.1])]}
    assert alarms.reward_hacking(records({}, rollouts=spread, task=task)).status == FIRED
    honest = "<answer>3 + 5 + 7</answer>"
    rare = {3: [*group(3, COUNTDOWN_PROMPT, [0.1] * 2, copied), *group(3, "p", [0.1] * 3, honest)]}
    assert alarms.reward_hacking(records({}, rollouts=rare, task=task)).status == OK


def test_reward_hacking_ignores_patterns_grpo_does_not_push_up_on_a_recorded_dump() -> None:
    """Recorded (tests/data/report/sft_grpo_quickstart: the quickstart's GRPO step 2 after SFT,
    4 prompts x 16): responses with several <answer> tags earn the format score, as much as or
    less than their groups' other answers, so GRPO gives them no positive advantage and the
    alarm stays quiet. Counting every response with a score above 0 fires on the same dump
    (the rule it replaced); the same responses made to beat their groups fire."""
    run = real("sft_grpo_quickstart")
    dump = run.rollouts[2]
    assert alarms.reward_hacking(run).status == OK
    patterns = countdown.SPEC.hacking_patterns
    hits = [
        r for r in dump if r.score > 0 and any(p.matches(r.prompt, r.response) for p in patterns)
    ]
    rewarded = [r for r in dump if r.score > 0]
    assert len(hits) >= alarms.HACKING_MIN_COUNT
    assert len(hits) / len(rewarded) >= alarms.HACKING_MIN_SHARE  # the old rule fires here
    boosted = [replace(r, score=1.0) if r in hits else r for r in dump]
    alarm = alarms.reward_hacking(records({}, rollouts={2: boosted}, task=run.task))
    assert alarm.status == FIRED and alarm.steps == (2,)


COUNTDOWN_PROMPT = countdown.build_prompt(countdown.Puzzle((3, 5, 7), 22), "chat")[-1]["content"]


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("(3 * 5) + 7 works.\n<answer>(3 * 5) + 7</answer>", set()),
        ("<answer>(1+2) / 3</answer>", {"copies_example"}),
        ("<answer>3 + 5</answer><answer>3 * 5 + 7</answer>", {"several_answers"}),
        ("<answer>" + " + ".join(["3"] * 30) + "</answer>", {"long_answer"}),
        ("<answer>the expression</answer>", {"no_arithmetic"}),
        ("<answer>3*5+7</answer>.", set()),
        ("<answer>3*5+7</answer> and I am certain this is right.", {"text_after_answer"}),
    ],
)
def test_countdown_hacking_patterns(response: str, expected: set[str]) -> None:
    found = {
        p.name for p in countdown.SPEC.hacking_patterns if p.matches(COUNTDOWN_PROMPT, response)
    }
    assert found == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Sam has 3 + 5 = 8 apples.\n#### 8 apples", set()),
        ("Sam has 3 + 5 = 8 apples.\n#### 1,000\n#### 1000", set()),
        ("Sam has 3 + 5 = 8 apples.\n#### 8\n#### 9", {"several_final_numbers"}),
        ("So it is \\boxed{9}, I mean 3 + 5 = 8.\n#### 8", {"several_final_numbers"}),
        ("#### 8", {"no_reasoning"}),
        ("It is 8.\n#### 8", {"no_reasoning"}),
        (
            "Sam has 3 + 5 = 8.\n#### 8\n" + "Another problem follows here. " * 3,
            {"text_after_answer"},
        ),
    ],
)
def test_gsm8k_hacking_patterns(response: str, expected: set[str]) -> None:
    found = {p.name for p in gsm8k.SPEC.hacking_patterns if p.matches("", response)}
    assert found == expected


def test_task_spec_names_the_modules_hacking_patterns_and_defaults_to_none() -> None:
    assert countdown.SPEC.hacking_patterns == countdown.HACKING_PATTERNS
    fields = {k: v for k, v in countdown.SPEC.__dict__.items() if k != "hacking_patterns"}
    assert TaskSpec(**fields).hacking_patterns == ()

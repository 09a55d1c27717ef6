"""The report's alarms on silent failures (issue 28): rollout/training mismatch, a policy that
never reaches the rollout, right answers cut or unparsed, phantom advantages. Each fires on its
planted case and stays quiet on a healthy twin; scripts/report.py prints the mismatch alarm.

Metrics are synthetic with verl 0.6.1's names (rollout_corr/* from
verl/trainer/ppo/rollout_corr_helper.py), except bench3/, a recorded CPU run logging them; dumps
are built in verl's format with the tasks' reward extras (rewards/), some scored by the real
rewards.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from rewards import countdown as countdown_reward
from rlvr.report import alarms
from rlvr.report.alarms import FIRED, NO_DATA, OK
from rlvr.report.alarms import mismatch_rules as mm
from rlvr.report.metrics_log import StepRecord
from rlvr.report.records import MIN_JUDGED_GROUPS, Rollout, RunRecords, load_run

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "report"


def records(
    metrics: Mapping[str, Sequence[float]], rollouts: Mapping[int, Sequence[Rollout]] | None = None
) -> RunRecords:
    """``metrics[key][i]`` logged at training step i + 1."""
    steps: dict[int, dict[str, float]] = {}
    for key, values in metrics.items():
        for i, value in enumerate(values):
            steps.setdefault(i + 1, {})[key] = value
    logged = tuple(StepRecord(step, data) for step, data in sorted(steps.items()))
    dumped = {step: tuple(rs) for step, rs in (rollouts or {}).items()}
    return RunRecords(Path("run"), logged, dumped)


def geometric(start: float, end: float, steps: int = 20) -> list[float]:
    return [start * (end / start) ** (i / (steps - 1)) for i in range(steps)]


def wobble(level: float, steps: int = 20, noise: float = 0.25) -> list[float]:
    """A flat series with step-to-step noise of up to ``noise`` times its level."""
    return [level * (1 + noise * ((-1) ** i) * (i % 3) / 2) for i in range(steps)]


# --- rollout/training mismatch ----------------------------------------------------------------

MISMATCH_CASES = [
    ("log-ppl gap drifts 0.001 to 1.0", {mm.LOG_PPL_ABS_DIFF: geometric(0.001, 1.0)}, FIRED),
    ("the same run without the drift", {mm.LOG_PPL_ABS_DIFF: wobble(0.001)}, OK),
    ("k3 KL passes verl's 0.1 once", {mm.K3_KL: [0.001] * 9 + [0.15]}, FIRED),
    ("kl below -0.1 (rollout less sure)", {mm.KL: [0.0] * 5 + [-0.2]}, FIRED),
    (
        "steady rise to 0.05, under the limit",
        {mm.LOG_PPL_ABS_DIFF: geometric(0.005, 0.05, 12)},
        FIRED,
    ),
    ("float noise rising 100x under the floor", {mm.K3_KL: geometric(1e-7, 1e-5)}, OK),
    ("one spike, then flat again", {mm.LOG_PPL_ABS_DIFF: [0.002] * 5 + [0.05] + [0.002] * 5}, OK),
    # 8x higher at the end than the start, but no steady rise: a jump that eased back
    ("a jump that eased back", {mm.LOG_PPL_ABS_DIFF: [0.005] * 4 + [0.08] * 4 + [0.04] * 4}, OK),
]


@pytest.mark.parametrize(
    ("metrics", "status"),
    [case[1:] for case in MISMATCH_CASES],
    ids=[case[0] for case in MISMATCH_CASES],
)
def test_mismatch_alarm(metrics: dict[str, list[float]], status: str) -> None:
    alarm = alarms.rollout_training_mismatch(records(metrics))
    assert alarm.status == status, alarm
    assert "mismatch" in alarm.title
    assert bool(alarm.steps) == (status == FIRED)


def test_mismatch_reads_the_recorded_rollout_corr_metrics() -> None:
    # bench3: a CPU run (identical weights, fp32) logging rollout_corr/* at about 1e-6
    assert "rollout_corr/log_ppl_abs_diff" in load_run(DATA / "bench3").steps[0].metrics
    assert alarms.rollout_training_mismatch(load_run(DATA / "bench3")).status == OK
    assert alarms.rollout_training_mismatch(load_run(DATA / "quickstart_smollm2")).status == NO_DATA


def report_main(*argv: str) -> object:
    """scripts/report.py's main in this process (its exit code)."""
    spec = importlib.util.spec_from_file_location("_report", ROOT / "scripts" / "report.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.main(list(argv))


@pytest.mark.parametrize(
    ("gap", "alarm_words"),
    [(geometric(0.001, 1.0), ["mismatch"]), ([0.001] * 20, [])],
    ids=["log-ppl gap drifts 0.001 to 1.0", "the same run without the drift"],
)
def test_report_script_prints_the_mismatch_alarm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gap: list[float], alarm_words: list[str]
) -> None:
    """The issue's done-when: scripts/report.py on the drifting run prints one alarm line
    containing "mismatch"; on the same run without the drift, no alarm at all."""
    lines = [
        json.dumps({"step": i + 1, "data": {mm.LOG_PPL_ABS_DIFF: v}}) for i, v in enumerate(gap)
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert report_main(str(tmp_path)) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if "ALARM" in line]
    assert len(printed) == len(alarm_words), printed
    assert all(word in line for word, line in zip(alarm_words, printed, strict=True))


# --- policy not reaching the rollout ------------------------------------------------------------


def policy_run(
    gap: list[float], rollout_ppl: list[float], training_ppl: list[float], lr: float = 1e-5
) -> RunRecords:
    steps = len(gap)
    return records(
        {
            mm.K3_KL: gap,
            mm.ROLLOUT_LOG_PPL: rollout_ppl,
            mm.TRAINING_LOG_PPL: training_ppl,
            mm.ACTOR_GRAD_NORM: [0.1] * steps,
            mm.ACTOR_LR: [lr] * steps,
            mm.ACTOR_KL_LOSS: [0.0008 * i for i in range(steps)],
        }
    )


STEPS = 12
GROWING = [0.0002 + 0.0008 * i for i in range(STEPS)]  # a stuck rollout: the actor's drift
FALLING_PPL = [0.9 - 0.02 * i for i in range(STEPS)]
POLICY_CASES = [
    # the rollout samples the base model: its own log-ppl stays, the trainer's drifts away
    (
        "adapter never synced",
        policy_run(GROWING, wobble(0.9, STEPS, noise=0.05), [0.9 + 0.02 * i for i in range(STEPS)]),
        FIRED,
    ),
    # healthy: the engines agree at every step and both policies sharpen together
    ("synced, gap flat", policy_run(wobble(1e-4, STEPS), FALLING_PPL, FALLING_PPL), OK),
    # a numerics gap growing while the rollout follows the trainer: the mismatch alarm's case
    (
        "gap grows, rollout follows",
        policy_run(GROWING, FALLING_PPL, [p + 0.01 * i for i, p in enumerate(FALLING_PPL)]),
        OK,
    ),
    (
        "gap grows, learning rate 0",
        policy_run(
            GROWING, wobble(0.9, STEPS, noise=0.05), [0.9 + 0.02 * i for i in range(STEPS)], lr=0.0
        ),
        OK,
    ),
    (
        "too few steps",
        policy_run(GROWING[:5], wobble(0.9, 5, noise=0.05), FALLING_PPL[:5]),
        NO_DATA,
    ),
]


@pytest.mark.parametrize(
    ("run", "status"), [case[1:] for case in POLICY_CASES], ids=[case[0] for case in POLICY_CASES]
)
def test_policy_not_reaching_the_rollout(run: RunRecords, status: str) -> None:
    alarm = alarms.policy_not_reaching_rollout(run)
    assert alarm.status == status, alarm
    if status == FIRED:
        assert alarm.steps and alarm.steps[-1] == STEPS and mm.ACTOR_KL_LOSS in alarm.detail


def test_the_two_rollout_alarms_tell_a_stuck_rollout_from_a_numerics_gap() -> None:
    """A gap growing past the mismatch floor while the rollout follows the trainer fires the
    mismatch alarm only; on the recorded CPU run neither fires."""
    big = [10 * g for g in GROWING]
    follows = policy_run(big, FALLING_PPL, [p + 0.01 * i for i, p in enumerate(FALLING_PPL)])
    assert alarms.rollout_training_mismatch(follows).status == FIRED
    assert alarms.policy_not_reaching_rollout(follows).status == OK
    assert alarms.policy_not_reaching_rollout(load_run(DATA / "bench3")).status == OK


# --- right answers cut or unparsed --------------------------------------------------------------


def response(
    prompt: str, score: float, correct: bool, cut: bool | None = None, **extras: Any
) -> Rollout:
    """A dumped response with the reward's extras (and the trainer's truncated flag)."""
    fields: dict[str, Any] = {"correct": float(correct), "acc": float(correct), "format": 1.0}
    if cut is not None:
        fields |= {"truncated": cut, "response_length": 1024 if cut else 300}
    text = extras.pop("text", "Sam has 14 + 3 = 17 apples.\n#### 17")
    return Rollout(5, prompt, text, score, fields | extras)


def cut_groups(finished_right: bool, cut_right: bool, groups: int = 4) -> list[Rollout]:
    """Groups of 4: two finished responses and two cut at the limit."""
    return [
        r
        for g in range(groups)
        for r in (
            *(
                response(f"p{g}", float(finished_right), finished_right, cut=False)
                for _ in range(2)
            ),
            *(response(f"p{g}", float(cut_right), cut_right, cut=True) for _ in range(2)),
        )
    ]


UNPARSED_RIGHT = "Sam has 14 apples and buys 3 more, so he has 14 + 3 = 17."
RESTATED = "The target is 17, so I would need more numbers."
CUT_CASES = [
    # finished answers to the same prompts are right: the cut ones likely would have been
    ("cut where the prompt is solved", cut_groups(True, False), FIRED),
    # right answers the model kept writing after, until the cap
    ("cut after a right answer", cut_groups(False, True), FIRED),
    ("cut only on unsolved prompts", cut_groups(False, False), OK),
    ("too few cut to judge", cut_groups(True, False, groups=1), OK),
    (
        "the parser missed right answers",
        [response("p", 0.0, False, format=0.0, gts="17", text=UNPARSED_RIGHT)] * 3
        + [response("q", 1.0, True, gts="17")] * 5,
        FIRED,
    ),
    (
        "a number restated mid-sentence is no answer",
        [response("p", 0.0, False, format=0.0, gts={"target": 17}, text=RESTATED)] * 3
        + [response("q", 1.0, True, gts="17")] * 5,
        OK,
    ),
    ("no correctness or format extras", [Rollout(5, "p", "x", 1.0)] * 4, NO_DATA),
]


@pytest.mark.parametrize(
    ("dump", "status"), [case[1:] for case in CUT_CASES], ids=[case[0] for case in CUT_CASES]
)
def test_correct_answers_cut_or_unparsed(dump: list[Rollout], status: str) -> None:
    alarm = alarms.answers_cut_or_unparsed(records({}, {5: dump}))
    assert alarm.status == status, alarm
    assert alarm.steps == ((5,) if status == FIRED else ())


def test_cut_rates_are_split_by_correctness_and_old_dumps_judge_the_parse_only() -> None:
    alarm = alarms.answers_cut_or_unparsed(records({}, {5: cut_groups(False, True)}))
    assert "100% of right answers, 0% of wrong ones" in alarm.detail
    recorded = load_run(DATA / "sft_grpo_quickstart")  # a real dump, before the truncated field
    alarm = alarms.answers_cut_or_unparsed(recorded)
    assert alarm.status == OK and "truncation unknown" in alarm.detail
    assert alarms.answers_cut_or_unparsed(records({})).status == NO_DATA


# --- phantom advantages -------------------------------------------------------------------------


def countdown_groups(shaping: bool, groups: int, wrong_only: int) -> list[Rollout]:
    """Countdown groups scored by the real reward: ``wrong_only`` of them all wrong (answers off
    by 1, 13 and 27, and one unformatted), the rest with a right answer among wrong ones."""
    truth = {"target": 24, "numbers": [4, 6, 1]}
    wrong = [
        "<answer>4 * 6 + 1</answer>",
        "<answer>4 + 6 + 1</answer>",
        "no idea",
        "<answer>4 - 6 - 1</answer>",
    ]
    right = ["<answer>4 * 6 * 1</answer>", *wrong[1:]]
    dump = []
    for g in range(groups):
        for text in wrong if g < wrong_only else right:
            scored = countdown_reward.compute_score("countdown", text, truth, shaping=shaping)
            dump.append(Rollout(3, f"p{g}", text, scored["score"], {"gts": truth, **scored}))
    return dump


PHANTOM_CASES = [
    ("closeness credit among wrong answers", countdown_groups(True, 32, 16), FIRED),
    # format credit alone: the unformatted answer scores 0, the others 0.1
    ("format credit among wrong answers", countdown_groups(False, 32, 16), FIRED),
    ("spread only where a right answer is", countdown_groups(True, 32, 0), OK),
    ("a few phantom groups", countdown_groups(True, 32, 6), OK),
    ("too few groups to judge", countdown_groups(True, 8, 8), NO_DATA),
]


@pytest.mark.parametrize(
    ("dump", "status"),
    [case[1:] for case in PHANTOM_CASES],
    ids=[case[0] for case in PHANTOM_CASES],
)
def test_phantom_advantages(dump: list[Rollout], status: str) -> None:
    alarm = alarms.phantom_advantages(records({}, {3: dump}))
    assert alarm.status == status, alarm


def test_all_wrong_groups_with_equal_scores_give_no_phantom_advantage() -> None:
    """Every answer formatted and wrong, no shaping: all score 0.1, no spread, no advantage."""
    truth = {"target": 24, "numbers": [4, 6, 1]}
    text = "<answer>4 + 6 + 1</answer>"
    scored = countdown_reward.compute_score("countdown", text, truth, shaping=False)
    dump = [
        Rollout(3, f"p{g}", text, scored["score"], dict(scored))
        for g in range(MIN_JUDGED_GROUPS)
        for _ in range(4)
    ]
    assert scored["score"] == 0.1
    assert alarms.phantom_advantages(records({}, {3: dump})).status == OK


# --- the registry -------------------------------------------------------------------------------


def test_every_alarm_is_documented_once_and_the_count_is_twelve() -> None:
    """The eight alarms before issue 28 and its four; each has a row in docs/REPORT.md."""
    assert len(alarms.CHECKS) == 12
    keys = [check(records({})).key for check in alarms.CHECKS]
    assert len(set(keys)) == len(keys)
    doc = (ROOT / "docs" / "REPORT.md").read_text()
    for check in alarms.CHECKS:
        assert f"| {check(records({})).title} |" in doc, check.__name__

"""What ``analyse`` recommends before a run: ``data.max_response_length`` and ``rollout.n``
from synthetic probe outputs, the template and end-of-sequence checks on offline tokenizers, and
both in the CLI's output and summary."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest

from rlvr.evaluation import EvalError, metrics, pipeline, records
from rlvr.evaluation import cli as eval_cli
from rlvr.evaluation import metrics as recommend
from rlvr.evaluation import model as model_checks
from rlvr.evaluation.metrics import Current
from rlvr.evaluation.records import GradedSample

TRAINING = Current(1024, "--experiment gsm8k_qwen2_5_3b")
# Qwen3's switch, as its chat template writes it (huggingface.co/Qwen/Qwen3-4B,
# tokenizer_config.json): an empty think block when enable_thinking is false.
QWEN3_LIKE_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\n\n</think>\n\n' }}{% endif %}{% endif %}"
)
IM_END, ENDOFTEXT = 2, 0  # the tiny tokenizer's ids (rlvr/models/tiny.py SPECIAL_TOKENS)


def sample(correct: bool, tokens: int, capped: bool = False, ids=()) -> GradedSample:
    return GradedSample(
        prompt_index=0,
        sample=0,
        prompt_tokens=10,
        response="...",
        response_tokens=tokens,
        finish_reason="length" if capped else "stop",
        parts={"score": 1.0 if correct else 0.0},
        token_ids=list(ids),
    )


def stats(pass_rates: list[float], n: int = 16) -> list[metrics.PromptStats]:
    """Per-prompt statistics of groups of n scores with these success rates."""
    groups = [[1.0] * round(p * n) + [0.0] * round((1 - p) * n) for p in pass_rates]
    return [metrics.prompt_stats(i, scores) for i, scores in enumerate(groups)]


# ---------------------------------------------------------------- data.max_response_length


def test_length_steps_are_powers_of_two_and_halfway() -> None:
    steps = [recommend.length_step(t) for t in (1, 17, 25, 33, 49, 65, 97, 129, 200, 625, 875)]
    assert steps == [16, 24, 32, 48, 64, 96, 128, 192, 256, 768, 1024]
    assert recommend.length_step(1024) == 1024 and recommend.length_step(1025) == 1536


LENGTH_CASES = {
    # case: (samples, probe cap, compared with) -> (action, suggested)
    "all correct, short": ([sample(True, 100)] * 64, 1024, TRAINING, ("lower", 128)),
    "short correct answers among wrong ones": (
        [sample(True, t) for t in range(100, 160)] + [sample(False, 900)] * 40,
        1024,
        TRAINING,
        ("lower", 256),  # 95% within 156 tokens, +25%: 195 -> 256; wrong answers' 900 ignored
    ),
    "all wrong: nothing to measure": ([sample(False, 300)] * 64, 1024, TRAINING, ("keep", 1024)),
    "cap-hit heavy at the training length": (
        [sample(True, 400)] * 70 + [sample(False, 1024, capped=True)] * 30,
        1024,
        TRAINING,
        ("raise", 2048),
    ),
    "cap-hit heavy below the training length": (
        [sample(True, 100)] * 70 + [sample(False, 256, capped=True)] * 30,
        256,
        TRAINING,
        ("probe again", 1024),
    ),
    "5% at the cap is not heavy": (
        [sample(True, 700)] * 95 + [sample(False, 1024, capped=True)] * 5,
        1024,
        TRAINING,
        ("keep", 1024),  # 700 * 1.25 -> 1024: not at most half
    ),
    "correct answers longer than training's": (
        [sample(True, 700)] * 64,
        2048,
        Current(512, "--experiment x"),
        ("raise", 1024),
    ),
    "not far shorter: keep": ([sample(True, 500)] * 64, 1024, TRAINING, ("keep", 1024)),
}


@pytest.mark.parametrize("case", LENGTH_CASES)
def test_max_response_length(case: str) -> None:
    samples, cap, current, expected = LENGTH_CASES[case]
    found = recommend.suggest_max_response_length(samples, cap, current)
    assert (found.action, found.suggested) == expected, found.reason
    assert found.setting == "data.max_response_length"
    assert found.current == current.value and found.compared_with == current.origin


# ---------------------------------------------------------------- actor_rollout_ref.rollout.n


def test_useful_group_share_by_hand() -> None:
    assert recommend.useful_group_share([0.5], 2) == pytest.approx(0.5)  # 2 of 4 outcomes mixed
    assert recommend.useful_group_share([0.0, 1.0], 16) == 0.0
    assert recommend.useful_group_share([0.5, 0.0], 4) == pytest.approx((1 - 2 / 16) / 2)


ROLLOUT_CASES = {
    # case: (per-prompt pass rates) -> suggested n (None: no n reaches the target)
    "all correct": ([1.0] * 20, None),
    "all wrong": ([0.0] * 20, None),
    "half right": ([0.5] * 20, 2),  # 1 - 0.25 - 0.25: exactly the target at n=2
    "mixed around one half": ([0.5] * 10 + [0.25, 0.75] * 5, 4),
    "mixed, mostly hard": ([0.125] * 10 + [0.25] * 10, 4),
}


@pytest.mark.parametrize("case", ROLLOUT_CASES)
def test_rollout_n(case: str) -> None:
    rates, expected = ROLLOUT_CASES[case]
    found = recommend.suggest_rollout_n(stats(rates), Current(16, "--experiment x"))
    assert found.suggested == expected, found.reason
    assert list(found.table) == ["2", "4", "8", "16"]
    if expected is None:
        assert found.action == "change the data" and "no n up to 16" in found.reason
    else:
        assert found.table[str(expected)] >= 0.5 and found.action == "lower"
        smaller = [n for n in recommend.ROLLOUT_NS if n < expected]
        assert all(found.table[str(n)] < 0.5 for n in smaller)


def test_the_papers_model_choice_comes_out_of_the_numbers() -> None:
    """verl-study (github.com/luohao-brian/verl-study, README): Qwen3-4B on GSM8K, 82% zero-shot
    with outcome entropy about 0.1, is too strong; Qwen2.5-3B, about 6.5% with variance above
    0.05, is right. Synthetic probes shaped like both, 16 samples per prompt."""
    strong = stats([1.0] * 80 + [0.5] * 2 + [1 / 16] * 18)  # most prompts always right
    summary = metrics.analyse_summary(strong)
    assert summary["accuracy"] == pytest.approx(0.82, abs=0.005)
    assert summary["mean_outcome_entropy"] == pytest.approx(0.1, abs=0.03)
    advice = recommend.suggest_rollout_n(strong, Current(16, "x"))
    assert advice.suggested is None and advice.table["16"] < 0.2  # no group size helps
    assert "80% of prompts were always right" in advice.reason

    right = stats([1 / 16] * 100)  # every prompt solved now and then: "knows a little"
    summary = metrics.analyse_summary(right)
    assert summary["accuracy"] == pytest.approx(0.0625) and summary["mean_variance"] > 0.05
    advice = recommend.suggest_rollout_n(right, Current(16, "x"))
    assert (advice.suggested, advice.action) == (16, "keep")  # 64% useful groups at 16
    assert advice.table["8"] < 0.5 <= advice.table["16"]


# ---------------------------------------------------------------- template and eos checks


@pytest.fixture
def tokenizer(tiny_tokenizer):
    return copy.deepcopy(tiny_tokenizer)  # each test edits its own


def statuses(checks) -> dict[str, str]:
    return {check.name: check.status for check in checks}


def test_a_chat_model_passes_every_check(tokenizer) -> None:
    done = [sample(True, 30)] * 19 + [sample(False, 64, capped=True)]
    checks = model_checks.model_checks(tokenizer, {}, [IM_END], [done], 64)
    assert statuses(checks) == dict.fromkeys(
        ["chat template", "thinking", "end of turn", "eos ids", "responses end"], "ok"
    ), [c.line() for c in checks]
    assert "95% ended with a stop token, 5% hit the 64-token cap" in checks[-1].message


def test_no_chat_template(tokenizer) -> None:
    tokenizer.chat_template = None
    checks = model_checks.model_checks(tokenizer, {}, [IM_END], [[sample(True, 5)]], 64)
    assert statuses(checks)["chat template"] == "warning" and "thinking" not in statuses(checks)
    assert "apply_chat_template" in checks[0].message and "fix:" in checks[0].message
    with pytest.raises(EvalError, match="no chat template"):
        model_checks.require_chat_template(tokenizer, {})
    # a template passed as a kwarg, as verl's RLHFDataset allows, is one
    template = {"chat_template": QWEN3_LIKE_TEMPLATE}
    model_checks.require_chat_template(tokenizer, template)
    assert model_checks.chat_template_check(tokenizer, template).status == "ok"


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [({}, "warning"), ({"enable_thinking": True}, "warning"), ({"enable_thinking": False}, "ok")],
)
def test_qwen3_thinking_switch(tokenizer, kwargs: dict, status: str) -> None:
    tokenizer.chat_template = QWEN3_LIKE_TEMPLATE
    check = model_checks.thinking_check(tokenizer, kwargs)
    assert check.status == status, check.line()
    if status == "warning":
        assert "enable_thinking=false" in check.message and "<think>" in check.message


def test_a_base_models_eos_never_stops_a_turn(tokenizer) -> None:
    """Qwen2.5-3B (base) ships ChatML but ends sequences with <|endoftext|>, in its tokenizer and
    generation config: a turn's <|im_end|> stops nothing, and answers run on to the cap."""
    tokenizer.eos_token = "<|endoftext|>"
    ran_on = [sample(True, 64, capped=True, ids=[5, IM_END, 1, 7])] * 3 + [sample(False, 9)]
    checks = model_checks.model_checks(tokenizer, {}, [ENDOFTEXT], [ran_on], 64)
    found = statuses(checks)
    assert found["chat template"] == found["end of turn"] == found["responses end"] == "warning"
    assert found["eos ids"] == "ok"
    assert "add 2 to eos_token_id" in checks[2].message
    assert "3 of those emitted <|im_end|> (id 2) and ran on" in checks[-1].message
    # listing it in generation_config.json fixes the end of turn
    fixed = model_checks.end_of_turn_check(tokenizer, {}, [ENDOFTEXT, IM_END])
    assert fixed.status == "ok"


def test_tokenizer_and_generation_config_eos_disagree(tokenizer) -> None:
    check = model_checks.eos_ids_check(tokenizer, [ENDOFTEXT])
    assert check.status == "warning" and "add 2 to eos_token_id" in check.message
    assert model_checks.eos_ids_check(tokenizer, [IM_END, ENDOFTEXT]).status == "ok"
    assert model_checks.eos_ids_check(tokenizer, None).status == "ok"  # no generation config


def test_responses_that_never_end(tokenizer) -> None:
    capped = [sample(False, 64, capped=True)] * 4
    check = model_checks.responses_end_check(tokenizer, capped, 64, IM_END, [IM_END])
    assert check.status == "warning" and "none ended" in check.message


def test_a_template_that_fails_costs_a_warning_not_the_run(tokenizer) -> None:
    tokenizer.chat_template = QWEN3_LIKE_TEMPLATE.replace(
        "{% for message in messages %}",
        "{% for message in messages %}{% if message['role'] == 'assistant' %}"
        "{{ raise_exception('no assistant turns here') }}{% endif %}",
    )
    checks = model_checks.model_checks(tokenizer, {}, [IM_END], [[sample(True, 5)]], 64)
    assert len(checks) == 5 and statuses(checks)["end of turn"] == "warning"
    assert "could not check: the chat template failed (no assistant turns here)" in checks[2].line()


def test_generation_config_eos_is_read_from_the_model_folder(
    tiny_model_dir: Path, tmp_path
) -> None:
    assert model_checks.generation_config_eos(tiny_model_dir) == [IM_END]
    assert model_checks.generation_config_eos(tmp_path) is None


# ---------------------------------------------------------------- in the summary and the CLI


def test_recommendations_round_trip_through_summary_json() -> None:
    advice = records.Recommendations(
        settings=[recommend.suggest_rollout_n(stats([0.5] * 4), Current(None, "no config"))],
        checks=[records.CheckLine(name="eos ids", status="ok", message="fine")],
    )
    header = records.RunHeader(
        command="analyse", task="countdown", model="m", data="d", prompts=4, backend="hf",
        sampling={}, reward_kwargs={}, template_kwargs={},
    )  # fmt: skip
    summary = records.Summary(header, {"accuracy": 0.5}, recommendations=advice)
    on_disk = json.dumps(summary.to_json())
    assert json.loads(on_disk)["recommendations"]["settings"][0]["suggested"] == 2
    assert records.Summary.from_json(on_disk) == summary


def test_analyse_prints_and_records_its_recommendations(
    tmp_path: Path, countdown_data: Path, tiny_model_dir: Path, capsys
) -> None:
    from rlvr.config.compose import compose

    experiment = "countdown_smollm2_cpu"
    trained = compose(experiment)
    argv = ["analyse", "--model_path", str(tiny_model_dir), "--data", str(countdown_data)]
    argv += ["--quiet", "--backend", "hf", "--limit", "3", "--n", "4", "--max_tokens", "8"]
    argv += ["--experiment", experiment, "--output", str(tmp_path / "run")]
    assert eval_cli.main("countdown", "t", argv) == 0
    out = capsys.readouterr().out
    length, n = trained.data.max_response_length, trained.actor_rollout_ref.rollout.n
    assert f"| `data.max_response_length` | {length} (--experiment {experiment}) |" in out
    assert f"| `actor_rollout_ref.rollout.n` | {n} (--experiment {experiment}) |" in out
    assert "| useful groups | 0% | 0% | 0% | 0% |" in out  # a random model is never right
    for name in ("chat template", "thinking", "end of turn", "eos ids"):
        assert f"- ok: {name}: " in out
    # the random model runs to the cap (all but a chance stop token: which ones, the seed says)
    assert re.search(r"- warning: responses end: \d+% ended with a stop token, \d+% hit", out)
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    suggested = summary["recommendations"]["settings"]
    assert [s["setting"] for s in suggested] == [
        "data.max_response_length", "actor_rollout_ref.rollout.n",
    ]  # fmt: skip
    assert suggested[0]["action"] == "probe again"  # the 8-token probe cap is below training's
    assert len(summary["recommendations"]["checks"]) == 5 and summary["verdict"] == "sft_first"
    assert "## Checks before a run" in (tmp_path / "run/summary.md").read_text()


def test_analyse_looks_for_the_end_of_turn_in_the_generated_tokens(
    tmp_path: Path, countdown_data: Path, tokenizer
) -> None:
    """A base-like model: its sampler stops on <|endoftext|> only, so responses that emit
    <|im_end|> run on to the cap; the check finds the token in the generated ids."""
    from rlvr import tasks
    from rlvr.evaluation import grading, prompts
    from rlvr.evaluation.generation import Generation
    from rlvr.evaluation.settings import SamplingSettings

    tokenizer.eos_token = "<|endoftext|>"

    class RunsOn:
        name = "runs-on"

        def __init__(self) -> None:
            self.tokenizer = tokenizer

        def generate(self, prompts, sampling):
            ran_on = Generation("no idea", 8, "length", [-1.0] * 8, [5, 6, IM_END, 1, 7, 8, 9, 5])
            return [[ran_on] * sampling.n for _ in prompts]

    run = grading.EvalRun(
        task=tasks.get("countdown"),
        model_path="runs-on",
        data_path=str(countdown_data),
        output_dir=tmp_path / "run",
        backend=RunsOn(),
        progress=False,
        generation_eos=[ENDOFTEXT],
    )
    rows = prompts.load_rows(countdown_data, limit=2)
    summary = pipeline.evaluate(
        "analyse", run, rows, SamplingSettings(n=2, temperature=1.0, max_tokens=8)
    )
    assert summary.recommendations is not None
    last = summary.recommendations.checks[-1]
    assert last.name == "responses end" and "4 of those emitted <|im_end|> (id 2)" in last.message


def test_analyse_refuses_a_model_without_a_chat_template(
    tmp_path: Path, countdown_data: Path, tiny_model_dir: Path, capsys
) -> None:
    model = tmp_path / "no_template"
    shutil.copytree(tiny_model_dir, model)
    (model / "chat_template.jinja").unlink()
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    argv = ["analyse", "--model_path", str(model), "--data", str(countdown_data), "--quiet"]
    argv += ["--backend", "hf", "--limit", "1", "--n", "2", "--max_tokens", "4"]
    assert eval_cli.main("countdown", "t", [*argv, "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "no chat template" in err and "apply_chat_template_kwargs.chat_template" in err
    assert len(err.strip().splitlines()) == 1

"""The eval records' JSON form: strict types, one-line errors naming the file and key, and the
flat on-disk keys (reward parts beside a sample's fields, ``pass@k`` beside a prompt's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.evaluation import EvalError, records

SAMPLE = {
    "prompt_index": 3, "sample": 1, "ground_truth": {"target": 7, "numbers": [1, 2]},
    "prompt_tokens": 40, "response": "<answer>1+2</answer>", "response_tokens": 9,
    "finish_reason": "stop", "mean_neg_logprob": 0.5,
    "score": 1.0, "format": True, "answer_key": "3",
}  # fmt: skip


def _sample(**changes: object) -> records.GradedSample:
    return records.parse(records.GradedSample, json.dumps({**SAMPLE, **changes}), "s.jsonl")


def test_a_sample_line_round_trips_with_its_reward_parts_beside_the_fields() -> None:
    sample = _sample()
    assert sample.parts == {"score": 1.0, "format": True, "answer_key": "3"}
    assert (sample.score, sample.format, sample.answer_key) == (1.0, 1.0, "3")
    assert sample.to_json() == SAMPLE and list(sample.to_json()) == list(SAMPLE)
    fields = {k: v for k, v in SAMPLE.items() if k not in sample.parts}
    built = records.GradedSample(**fields, parts=sample.parts, logprobs=[-0.5])
    assert built == sample.model_copy(update={"logprobs": [-0.5]})
    assert built.to_json() == SAMPLE  # the logprobs stay in memory


@pytest.mark.parametrize("bad", ["40", 40.0, True, None])
def test_an_integer_field_refuses_strings_floats_and_bools(bad: object) -> None:
    assert _sample(prompt_tokens=40).prompt_tokens == 40  # the negative control
    with pytest.raises(
        EvalError, match=r"^s\.jsonl: 'prompt_tokens': Input should be a valid integer"
    ):
        _sample(prompt_tokens=bad)


@pytest.mark.parametrize("bad", ["0.5", True])
def test_a_number_field_refuses_strings_and_bools(bad: object) -> None:
    assert _sample(mean_neg_logprob=1).mean_neg_logprob == 1.0  # an integer is a number
    with pytest.raises(
        EvalError, match=r"^s\.jsonl: 'mean_neg_logprob': Input should be a valid number"
    ):
        _sample(mean_neg_logprob=bad)


def test_a_sample_without_a_numeric_score_is_refused() -> None:
    with pytest.raises(EvalError, match="prompt 3: the reward returned no numeric score"):
        _sample(score="high")


def test_bad_lines_fail_in_one_line_naming_the_file_line_and_key(tmp_path: Path) -> None:
    good = json.dumps(SAMPLE)
    samples = tmp_path / "samples.jsonl"
    samples.write_text(f"{good}\n\n{good}\n")
    assert len(records.read_records(samples, records.GradedSample)) == 2
    missing = {k: v for k, v in SAMPLE.items() if k != "response"}
    samples.write_text(f"{good}\n{json.dumps(missing)}\n")
    with pytest.raises(EvalError) as error:
        records.read_records(samples, records.GradedSample)
    assert str(error.value) == f"{samples} line 2: 'response': Field required"
    samples.write_text(f"{good}\n{good[:-1]}\n")
    with pytest.raises(EvalError, match=r"line 2: Invalid JSON: EOF while parsing an object"):
        records.read_records(samples, records.GradedSample)
    summary = tmp_path / "summary.json"
    summary.write_text("[1, 2]")
    with pytest.raises(EvalError, match=r"summary\.json: Input should be an object$"):
        records.load_summary(summary)


def test_a_prompts_line_writes_pass_and_maj_at_k_as_flat_keys() -> None:
    record = records.PassKRecord(
        prompt_index=0, ground_truth=None, n=4, successes=1,
        pass_at={1: 0.25, 4: 1.0}, maj_at={1: 0.25},
    )  # fmt: skip
    assert record.to_json() == {
        "prompt_index": 0, "ground_truth": None, "n": 4, "successes": 1,
        "pass@1": 0.25, "pass@4": 1.0, "maj@1": 0.25,
    }  # fmt: skip


def test_an_analyse_line_refuses_a_string_for_a_number() -> None:
    line = {"prompt_index": 1, "n": 4, "mean_score": 0.5, "success_rate": 0.5, "variance": 0.25,
            "outcome_entropy": 1.0, "token_entropy": None, "ground_truth": 7}  # fmt: skip
    record = records.parse(records.AnalyseRecord, json.dumps(line), "p.jsonl")
    assert record.to_json() == line and record.variance == 0.25
    with pytest.raises(EvalError, match=r"^p\.jsonl: 'n': Input should be a valid integer"):
        records.parse(records.AnalyseRecord, json.dumps({**line, "n": "4"}), "p.jsonl")

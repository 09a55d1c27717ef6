"""``analyse``'s recommendations on a recorded probe: SmolLM2-135M-Instruct on Countdown
(tests/data/probe/smollm2_countdown/, whose README gives the command). Recomputed from
``samples.jsonl`` through the project's readers, they equal what the CLI wrote in
``summary.json``; and the numbers in them follow from the raw samples, counted here without the
project's code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.evaluation import metrics as recommend
from rlvr.evaluation import records
from rlvr.evaluation.records import AnalyseRecord, GradedSample, SuggestedSetting, Summary
from rlvr.evaluation.settings import RunSettings

RECORDED = Path(__file__).parent / "data/probe/smollm2_countdown"


def jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (RECORDED / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def summary() -> Summary:
    return records.load_summary(RECORDED)


@pytest.fixture(scope="module")
def samples() -> list[GradedSample]:
    return records.read_records(RECORDED / "samples.jsonl", GradedSample)


def recorded_settings(summary: Summary) -> list[SuggestedSetting]:
    assert summary.recommendations is not None
    return summary.recommendations.settings


def probe_cap(summary: Summary) -> int:
    cap = summary.header.sampling["max_tokens"]
    assert isinstance(cap, int)
    return cap


def recompute(summary: Summary, samples: list[GradedSample]) -> list[SuggestedSetting]:
    """The recommendations from the samples, against the training values the CLI compared with
    when it recorded the run (the summary's, not today's experiment, which may change)."""
    length, rollout_n = recorded_settings(summary)
    assert length.current is not None
    training = RunSettings(
        origin=length.compared_with,
        max_response_length=length.current,
        reward_kwargs=summary.header.reward_kwargs,
        template_kwargs=summary.header.template_kwargs,
        rollout_n=rollout_n.current,
    )
    return recommend.settings_from_samples(samples, probe_cap(summary), training)


def test_the_recording_is_a_whole_analyse_run(summary: Summary) -> None:
    raw = jsonl("samples.jsonl")
    n = summary.header.sampling["n"]
    assert summary.header.command == "analyse" and isinstance(n, int)
    per_prompt = [sum(s["prompt_index"] == i for s in raw) for i in range(summary.header.prompts)]
    assert per_prompt == [n] * summary.header.prompts  # 12 prompts x 4 samples, none lost
    assert [s.setting for s in recorded_settings(summary)] == [
        recommend.MAX_RESPONSE_LENGTH, recommend.ROLLOUT_N,
    ]  # fmt: skip


def test_the_recompute_equals_what_the_cli_recorded(
    summary: Summary, samples: list[GradedSample]
) -> None:
    assert recompute(summary, samples) == recorded_settings(summary)


def test_the_recompute_differs_when_the_samples_do(
    summary: Summary, samples: list[GradedSample]
) -> None:
    """Negative control: the same samples, none cut at the cap, recommend something else."""
    ended = [s.model_copy(update={"finish_reason": "stop"}) for s in samples]
    length = recompute(summary, ended)[0]
    assert length != recorded_settings(summary)[0]
    assert (length.action, length.suggested) == ("keep", probe_cap(summary))  # nothing to measure


def test_max_response_length_follows_from_the_cap_hit_rate(summary: Summary) -> None:
    """SmolLM2-135M-Instruct rambles: most samples run into the experiment's 24-token cap and
    none is correct, so the cap-hit rule (> 5% at the cap) decides, before any length quantile:
    double the cap and probe again."""
    raw = jsonl("samples.jsonl")
    cap = probe_cap(summary)
    cap_hit = sum(s["finish_reason"] == "length" for s in raw) / len(raw)
    correct_lengths = [s["response_tokens"] for s in raw if s["score"] == 1.0]
    assert cap_hit == summary.metrics["truncated_rate"]  # 31 of 48, as the summary's metric
    assert cap_hit > recommend.CAP_HIT_RAISE_ABOVE and correct_lengths == []
    length = recorded_settings(summary)[0]
    assert (length.action, length.current) == ("raise", cap)  # the cap was the experiment's 24
    assert length.suggested == 2 * cap == 48  # 48 = 1.5 * 32: already a step of the ladder
    assert f"{cap_hit:.0%} of samples hit the probe's {cap}-token cap" in length.reason


def test_rollout_n_follows_from_the_per_prompt_pass_rates(summary: Summary) -> None:
    """Each prompt's pass rate p from the raw scores (and as prompts.jsonl recorded it); the
    useful-group share 1 - p^n - (1-p)^n, averaged: no n helps a model that never succeeds."""
    raw = jsonl("samples.jsonl")
    prompts = range(summary.header.prompts)
    scores = [[s["score"] for s in raw if s["prompt_index"] == i] for i in prompts]
    pass_rates = [sum(score == 1.0 for score in group) / len(group) for group in scores]
    recorded_rates = records.read_records(RECORDED / "prompts.jsonl", AnalyseRecord)
    assert pass_rates == [r.success_rate for r in recorded_rates]
    expected = {
        str(n): sum(1 - p**n - (1 - p) ** n for p in pass_rates) / len(pass_rates)
        for n in recommend.ROLLOUT_NS
    }
    rollout_n = recorded_settings(summary)[1]
    assert rollout_n.table == pytest.approx(expected)
    assert max(pass_rates) == 0.0 and set(rollout_n.table.values()) == {0.0}
    assert (rollout_n.action, rollout_n.suggested) == ("change the data", None)
    assert rollout_n.current == 16  # countdown_smollm2_cpu's rollout.n when recorded
    assert "100% always wrong" in rollout_n.reason
    # format credit alone (score 0.1) spreads 2 of the 12 groups: a spread, not a signal
    spread = sum(len(set(group)) > 1 for group in scores) / len(scores)
    assert spread == summary.metrics["nonzero_variance_fraction"] == 2 / 12

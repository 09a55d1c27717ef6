"""Reference bands (rlvr/report/bands.py, rlvr/report/reference_bands.yaml): the data file's
strict schema, matching a run to published entries, the verdicts, and the line in report.md and
scripts/report.py's output."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlvr import report as run_report
from rlvr.report import bands, references
from rlvr.report.bands import BandsError, ReferenceBands, RunFacts, compare, load_bands
from rlvr.report.run_plan import read_run_plan, write_run_plan

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "report.py"

#: A small valid document: one entry with intermediate points, one with the final value only.
DOC: dict[str, Any] = {
    "version": 1,
    "protocols": {
        "p-hash": {"family": "hash", "description": "last '#### N'", "defined_in": "x"},
        "p-hash-2": {"family": "hash", "description": "first '#### N'", "defined_in": "y"},
        "p-boxed": {"family": "boxed", "description": r"last \boxed{}", "defined_in": "z"},
    },
    "entries": [
        {
            "id": "curve",
            "model": "Org/Model-1B",
            "task": "gsm8k",
            "task_variant": "test",
            "method": "GRPO",
            "protocol": "p-hash",
            "metric": "acc",
            "decoding": {"kind": "greedy", "samples_per_prompt": 1},
            "eval_size": 1000,
            "steps_note": "every 50 steps",
            "points": [{"step": 0, "value": 0.5}, {"step": 100, "value": 0.7}],
            "source": {"url": "https://example.org/log", "where": "table 1"},
        },
        {
            "id": "final-only",
            "model": "Org/Model-7B",
            "task": "gsm8k",
            "task_variant": "test",
            "method": "GRPO-LoRA",
            "protocol": "p-hash",
            "metric": "acc",
            "decoding": {"kind": "greedy", "samples_per_prompt": 1},
            "eval_size": 1000,
            "steps_note": "end of training only",
            "points": [{"step": None, "value": 0.9}],
            "source": {"url": "https://example.org/table", "where": "row 7B"},
        },
    ],
}


def write_doc(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "bands.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False) if not isinstance(doc, str) else doc)
    return path


# --- the data file ------------------------------------------------------------------------------


def test_the_shipped_data_file_validates_and_every_entry_names_a_public_source() -> None:
    shipped = load_bands()
    assert shipped.version >= 1 and len(shipped.entries) >= 5
    assert all(entry.source.url.startswith("https://") for entry in shipped.entries)
    wanted = {("Qwen/Qwen2.5-3B-Instruct", 0.861), ("Qwen/Qwen3-4B", 0.78)}
    found = {(entry.model, point.value) for entry in shipped.entries for point in entry.points}
    assert wanted <= found
    # The trainer records these protocol ids (bands.own_protocol); each must be described.
    for task, kwargs in [("gsm8k", {}), ("gsm8k", {"method": "flexible"}), ("countdown", {})]:
        assert bands.own_protocol(task, kwargs) in shipped.protocols


def _mutated(change: str) -> object:
    doc = copy.deepcopy(DOC)
    entry = doc["entries"][0]
    if change == "unknown key":
        entry["url"] = "https://example.org"
    elif change == "missing source":
        del entry["source"]
    elif change == "source without url":
        del entry["source"]["url"]
    elif change == "source url not https":
        entry["source"]["url"] = "example.org/log"
    elif change == "value as text":
        entry["points"][0]["value"] = "0.5"
    elif change == "step as text":
        entry["points"][0]["step"] = "0"
    elif change == "value above 1":
        entry["points"][1]["value"] = 70.0
    elif change == "steps out of order":
        entry["points"].reverse()
    elif change == "two final points":
        doc["entries"][1]["points"].append({"step": None, "value": 0.8})
    elif change == "undescribed protocol":
        entry["protocol"] = "p-other"
    elif change == "duplicate id":
        doc["entries"][1]["id"] = "curve"
    elif change == "unknown top-level key":
        doc["notes"] = "x"
    return doc


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("unknown key", "entries.0.url: Extra inputs are not permitted"),
        ("missing source", "entries.0.source: Field required"),
        ("source without url", "entries.0.source.url: Field required"),
        ("source url not https", "entries.0.source.url: String should match pattern"),
        ("value as text", "entries.0.points.0.value: Input should be a valid number"),
        ("step as text", "entries.0.points.0.step: Input should be a valid integer"),
        ("value above 1", "entries.0.points.1.value: Input should be less than or equal to 1"),
        ("steps out of order", "steps must strictly increase"),
        ("two final points", "at most one end-of-training point"),
        ("undescribed protocol", "entry curve: unknown protocol 'p-other'"),
        ("duplicate id", "duplicate id curve"),
        ("unknown top-level key", "notes: Extra inputs are not permitted"),
    ],
)
def test_the_data_file_is_validated_strictly(tmp_path: Path, change: str, message: str) -> None:
    assert load_bands(write_doc(tmp_path, DOC)).version == 1  # negative control: valid as is
    with pytest.raises(BandsError, match="^" + str(tmp_path)) as refused:
        load_bands(write_doc(tmp_path, _mutated(change)))
    assert message in str(refused.value)


def test_a_key_given_twice_in_the_yaml_is_refused_not_overwritten(tmp_path: Path) -> None:
    text = yaml.safe_dump(DOC, sort_keys=False).replace("version: 1\n", "version: 1\nversion: 2\n")
    assert yaml.safe_load(text)["version"] == 2  # what plain PyYAML would have done silently
    with pytest.raises(BandsError, match="duplicate key 'version'"):
        load_bands(write_doc(tmp_path, text))


# --- matching and verdicts ----------------------------------------------------------------------

BANDS = ReferenceBands.model_validate(DOC)
GREEDY = "val-core/openai/gsm8k/acc/mean@1"


def facts(**given: Any) -> RunFacts:
    base: dict[str, Any] = {
        "model": "Org/Model-1B",
        "task": "gsm8k",
        "protocol": "p-hash",
        "val_key": GREEDY,
        "validations": ((0, 0.5), (50, 0.6)),
        "planned_steps": 200,
    }
    return RunFacts(**{**base, **given})


#: (id, run facts, verdict, what the line must say). Entry "curve": 0.5 at step 0, 0.7 at step
#: 100 (band ±0.04 around 0.6 on 1,000 prompts); entry "final-only": 0.9 at the end.
CASES = [
    ("on track, interpolated", facts(), "on track", "on track at step 50 (published points"),
    ("behind", facts(validations=((0, 0.5), (50, 0.5))), "behind", "0.500 vs 0.600 ± 0.044"),
    ("ahead", facts(validations=((0, 0.5), (50, 0.7))), "ahead", "ahead at step 50"),
    (
        "past the last point: compared there",
        facts(validations=((0, 0.5), (100, 0.69), (150, 0.8))),
        "on track",
        "on track at step 100: 0.690 vs 0.700",
    ),
    (
        "a local copy of the model matches",
        facts(model="/models/model-1b/"),
        "on track",
        "protocol p-hash, the run's own [curve: GRPO",
    ),
    (
        "same family, other protocol",
        facts(protocol="p-hash-2"),
        "on track",
        "the run's p-hash-2 reads the same answer (family hash)",
    ),
    (
        "protocol mismatch",
        facts(protocol="p-boxed"),
        None,
        "not comparable: protocol p-hash (greedy) vs p-boxed",
    ),
    (
        "decoding mismatch",
        facts(val_key="val-core/openai/gsm8k/acc/mean@16"),
        None,
        "not comparable: protocol p-hash (greedy) vs p-hash (sampled",
    ),
    (
        "a reward, not an accuracy",
        facts(val_key="val-core/openai/gsm8k/reward/mean@1"),
        None,
        "logs a reward, not an accuracy",
    ),
    ("protocol unknown", facts(protocol=None), None, "vs unknown (run_plan.json records no"),
    (
        "final only, run finished",
        facts(model="Org/Model-7B", validations=((100, 0.6), (200, 0.88))),
        "on track",
        "on track at step 200 (end of training vs the source's end): 0.880 vs 0.900",
    ),
    (
        "final only, run unfinished",
        facts(model="Org/Model-7B", validations=((100, 0.6),)),
        None,
        "no verdict yet: the source gives its end-of-training value only; the run's last "
        "validation is at step 100 of 200 planned",
    ),
    (
        "no validation yet",
        facts(validations=()),
        None,
        "no verdict yet: the run has logged no validation yet",
    ),
    (
        "no match",
        facts(model="Org/Model-3B"),
        None,
        "no published reference for model Org/Model-3B on task gsm8k",
    ),
    ("other task", facts(task="countdown"), None, "no published reference for model"),
    ("no model recorded", facts(model=None), None, "none compared: run_plan.json names no model"),
]


@pytest.mark.parametrize(
    ("given", "verdict", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_matching_and_verdicts(given: RunFacts, verdict: str | None, says: str) -> None:
    (comparison,) = compare(given, BANDS)
    assert comparison.verdict == verdict
    assert says in comparison.line, comparison.line
    assert "\n" not in comparison.line


def test_a_reference_that_starts_after_the_run_gives_no_verdict_yet() -> None:
    late = copy.deepcopy(DOC)
    late["entries"][0]["points"] = [{"step": 60, "value": 0.6}, {"step": 100, "value": 0.7}]
    (comparison,) = compare(facts(), ReferenceBands.model_validate(late))
    assert comparison.verdict is None
    assert "the reference starts at step 60; the run's last validation is at step 50" in (
        comparison.line
    )


def test_the_band_is_two_standard_errors_of_a_difference_with_a_floor() -> None:
    assert bands.tolerance(0.861, 1319) == pytest.approx(0.0269, abs=1e-4)
    assert bands.tolerance(0.78, 100) == pytest.approx(0.1172, abs=1e-4)
    assert bands.tolerance(0.0, 1319) == bands.MIN_TOLERANCE
    assert bands.interpolate([(0, 0.5), (100, 0.7)], 25) == pytest.approx(0.55)
    assert bands.interpolate([(0, 0.5), (100, 0.7)], 101) is None
    assert bands.interpolate([(0, 0.5)], 0) == 0.5


# --- the run plan and the report ----------------------------------------------------------------


def test_the_run_plan_records_what_matching_needs_and_stays_as_before_without_it(
    tmp_path: Path,
) -> None:
    write_run_plan(tmp_path, 5, "e")
    assert set(json.loads((tmp_path / "run_plan.json").read_text())) == {
        "total_training_steps",
        "experiment",
        "checkpoints",
    }
    write_run_plan(tmp_path, 5, "e", model="Qwen/Qwen2.5-3B-Instruct", answer_protocol="x")
    plan, note = read_run_plan(tmp_path)
    assert note is None and plan is not None
    assert (plan.model, plan.task, plan.answer_protocol) == ("Qwen/Qwen2.5-3B-Instruct", None, "x")


@pytest.mark.parametrize(
    ("experiment", "overrides", "expected"),
    [
        ("gsm8k_qwen2_5_3b", [], ("Qwen/Qwen2.5-3B-Instruct", "gsm8k", "rlvr-gsm8k-strict")),
        (
            "gsm8k_qwen2_5_3b",
            ["custom_reward_function.reward_kwargs.method=flexible"],
            ("Qwen/Qwen2.5-3B-Instruct", "gsm8k", "rlvr-gsm8k-flexible"),
        ),
        ("countdown_qwen3_4b", [], ("Qwen/Qwen3-4B-Instruct-2507", "countdown", "rlvr-countdown")),
    ],
)
def test_plan_fields_from_a_recipe(
    experiment: str, overrides: list[str], expected: tuple[str, str, str]
) -> None:
    from rlvr.config.compose import compose

    fields = references.plan_fields(compose(experiment, overrides))
    assert (fields["model"], fields["task"], fields["answer_protocol"]) == expected


def gsm8k_run(folder: Path, final_acc: float, model: str | None) -> Path:
    """A finished 20-step GSM8K run validated at steps 0, 10 and 20."""
    folder.mkdir()
    lines = []
    for step in range(21):
        data: dict[str, float] = {"critic/score/mean": 0.5}
        if step in (0, 10, 20):
            data[GREEDY] = {0: 0.7, 10: 0.8, 20: final_acc}[step]
        lines.append(json.dumps({"step": step, "data": data}) + "\n")
    (folder / "metrics.jsonl").write_text("".join(lines))
    protocol = "rlvr-gsm8k-strict" if model else None
    write_run_plan(folder, 20, "gsm8k", model=model, task="gsm8k", answer_protocol=protocol)
    return folder


def run_script(*argv: str) -> object:
    spec = importlib.util.spec_from_file_location("_report_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.main(list(argv))


@pytest.mark.parametrize(
    ("final_acc", "model", "says"),
    [
        (
            0.85,
            "Qwen/Qwen2.5-3B-Instruct",
            "on track at step 20 (end of training vs the source's end): 0.850 vs 0.861 ± 0.027 "
            "published; protocol verl-gsm8k-strict, the run's rlvr-gsm8k-strict reads the same "
            "answer (family gsm8k-hash-answer) [verl-baseline-qwen2.5-3b-instruct-grpo-lora",
        ),
        (0.60, "/models/Qwen2.5-3B-Instruct", "behind at step 20"),
        (0.60, "Qwen/Qwen2.5-72B", "no published reference for model Qwen/Qwen2.5-72B on task"),
        (0.60, None, "none compared: run_plan.json names no model"),
    ],
)
def test_report_md_and_the_script_show_the_reference_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    final_acc: float,
    model: str | None,
    says: str,
) -> None:
    run = gsm8k_run(tmp_path / "run", final_acc, model)
    text = run_report.build(run).path.read_text()
    section = text.split("## Reference (published results; no alarm)\n\n", 1)[1]
    assert section.startswith(f"- {says}"), section[:300]
    assert run_script(str(run)) == 0
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"reference: {says}") for line in printed), printed

"""Throughput against published runs (rlvr/report/throughput.py, reference_bands.yaml's
``throughput``): the verdict line in report.md's Reference section and scripts/report.py's
output, on synthetic perf/throughput logs."""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from test_bands import DOC, run_script, write_doc

from rlvr import report as run_report
from rlvr.report import references, throughput
from rlvr.report.bands import BandsError, load_bands
from rlvr.report.run_plan import read_run_plan, write_run_plan

SECTION = "## Reference (published results; no alarm)\n\n"
FAST = {
    "enforce_eager": False,
    "param_offload": False,
    "optimizer_offload": False,
    "gpu_memory_utilization": 0.5,
    "use_dynamic_bsz": True,
    "use_remove_padding": True,
}  # the settings of gsm8k_qwen2_5_0_5b_1gpu (hardware/h100x1.yaml)
PUBLISHED = 2391  # play-verl-grpo-qwen2.5-0.5b-instruct-h100


def gpu_run(
    folder: Path,
    per_step: list[float],
    *,
    model: str = "Qwen/Qwen2.5-0.5B-Instruct",
    gpu: str | None = "H100 80GB",
    settings: dict[str, Any] | None = None,
) -> Path:
    """A GSM8K run that logged ``per_step`` as perf/throughput at steps 1, 2, ... (step 0: the
    validation before training, as verl logs it, without a throughput)."""
    folder.mkdir()
    lines = [json.dumps({"step": 0, "data": {"val-core/openai/gsm8k/acc/mean@1": 0.3}}) + "\n"]
    for step, value in enumerate(per_step, start=1):
        data = {"critic/score/mean": 0.5, "perf/throughput": value, "timing_s/step": 30.0}
        lines.append(json.dumps({"step": step, "data": data}) + "\n")
    (folder / "metrics.jsonl").write_text("".join(lines))
    write_run_plan(
        folder,
        len(per_step),
        "gsm8k_qwen2_5_0_5b_1gpu",
        model=model,
        task="gsm8k",
        answer_protocol="rlvr-gsm8k-strict",
        gpu=gpu,
        settings=FAST if settings is None else settings,
    )
    return folder


def reference_section(run: Path) -> list[str]:
    text = run_report.build(run).path.read_text()
    section = text.split(SECTION, 1)[1].split("\n\n", 1)[0]
    return section.splitlines()


def throughput_line(run: Path) -> str | None:
    found = [line for line in reference_section(run) if line.startswith("- throughput")]
    assert len(found) <= 1, found
    return found[0] if found else None


def test_a_run_near_the_published_figure_is_on_track(tmp_path: Path) -> None:
    line = throughput_line(gpu_run(tmp_path / "run", [900.0, 2100.0, 2300.0, 2200.0]))
    assert line is not None
    assert line.startswith(
        "- throughput on track: median 2,200 tokens/s/GPU over steps 2-4 (perf/throughput; the "
        "first step left out as warm-up) vs 2,391 published, 0.92x "
        "[play-verl-grpo-qwen2.5-0.5b-instruct-h100: gsm8k on 8x H100, responses <= 192 tokens"
    ), line
    assert "https://github.com/dingxianzhong/play-verl/blob/" in line
    assert "ALARM" not in line and "FIRED" not in line


def test_a_slow_run_says_so_and_names_enforce_eager(tmp_path: Path) -> None:
    slow = {**FAST, "enforce_eager": True, "param_offload": True, "gpu_memory_utilization": 0.3}
    line = throughput_line(gpu_run(tmp_path / "run", [300.0, 700.0, 650.0], settings=slow))
    assert line is not None
    assert "throughput slower than published: median 675 tokens/s/GPU" in line, line
    assert "0.28x; settings here that often explain it: rollout.enforce_eager=true" in line
    assert "actor.fsdp_config.param_offload=true" in line
    assert "rollout.gpu_memory_utilization=0.3 (< 0.5)" in line
    # the same slow figures with the recipe's own settings: no setting is blamed
    plain = throughput_line(gpu_run(tmp_path / "plain", [300.0, 700.0, 650.0]))
    assert plain is not None and "slower than published" in plain
    assert "enforce_eager=true" not in plain
    assert "none of enforce_eager, offload, gpu_memory_utilization < 0.5" in plain


def test_the_slow_verdict_is_not_an_alarm(tmp_path: Path) -> None:
    run = gpu_run(tmp_path / "run", [300.0, 700.0, 650.0], settings={**FAST, "enforce_eager": True})
    built = run_report.build(run)
    assert all("throughput" not in alarm.title.lower() for alarm in built.alarms)
    alarms_part = built.path.read_text().split(SECTION, 1)[0]
    assert "slower than published" not in alarms_part


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ({"model": "Qwen/Qwen2.5-3B-Instruct"}, "no entry for this model"),
        ({"gpu": "A100 80GB"}, "no entry for this GPU"),
        ({"gpu": None}, "a CPU run: the overlay declares no GPU"),
    ],
)
def test_a_run_without_a_matching_entry_says_nothing(
    tmp_path: Path, given: dict[str, Any], why: str
) -> None:
    slow = gpu_run(tmp_path / "run", [100.0, 100.0, 100.0], **given)
    assert throughput_line(slow) is None, why
    # negative control: the same figures on the matching recipe do get a verdict
    matched = throughput_line(gpu_run(tmp_path / "matched", [100.0, 100.0, 100.0]))
    assert matched is not None and "slower than published" in matched


def test_the_first_step_is_left_out_as_warm_up(tmp_path: Path) -> None:
    # step 1 slow (CUDA graph capture, first weight sync), step 2 at the published pace
    line = throughput_line(gpu_run(tmp_path / "run", [100.0, 2000.0]))
    assert line is not None and "throughput on track: median 2,000" in line
    # negative control: had step 1 counted, the median (1,050) would be slower than published
    assert statistics.median([100.0, 2000.0]) / PUBLISHED < throughput.SLOWER_BELOW
    only_first = throughput_line(gpu_run(tmp_path / "first", [100.0]))
    assert only_first is not None and "no verdict yet: only the first training step" in only_first


def test_the_script_prints_the_throughput_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = gpu_run(tmp_path / "run", [300.0, 700.0, 650.0], settings={**FAST, "enforce_eager": True})
    assert run_script(str(run)) == 0
    printed = capsys.readouterr().out.splitlines()
    assert any(
        line.startswith("reference: throughput slower than published") and "enforce_eager" in line
        for line in printed
    ), printed


def test_the_recipe_records_its_gpu_and_settings_and_matches_the_published_entry(
    tmp_path: Path,
) -> None:
    from rlvr.config.compose import compose

    fields = references.plan_fields(compose("gsm8k_qwen2_5_0_5b_1gpu"))
    assert (fields["gpu"], fields["settings"]) == ("H100 80GB", FAST)
    run = gpu_run(tmp_path / "run", [800.0, 2500.0, 2300.0])
    write_run_plan(run, 3, "gsm8k_qwen2_5_0_5b_1gpu", **fields)  # as RecipeTrainer.fit does
    plan, note = read_run_plan(run)
    assert note is None and plan is not None and plan.settings == FAST
    line = throughput_line(run)
    assert line is not None and line.startswith("- throughput on track: median 2,400"), line
    entry = throughput.matching_entry(load_bands(), str(plan.model), plan.gpu)
    assert entry is not None and entry.id == "play-verl-grpo-qwen2.5-0.5b-instruct-h100"
    assert entry.tokens_per_s_per_gpu == PUBLISHED
    # the CPU quickstart declares no GPU: nothing to match
    cpu = references.plan_fields(compose("countdown_smollm2_cpu"))
    assert (
        cpu["gpu"] is None and throughput.matching_entry(load_bands(), cpu["model"], None) is None
    )


def test_gpu_kinds() -> None:
    assert throughput.gpu_kind("H100 80GB") == "H100"
    assert throughput.gpu_kind("NVIDIA H100 80GB HBM3") == "H100"
    assert throughput.gpu_kind("A100 80GB") == "A100"
    assert throughput.gpu_kind("cpu") is None and throughput.gpu_kind(None) is None


def _with_throughput(change: str) -> object:
    doc = copy.deepcopy(DOC)
    entry = copy.deepcopy(load_bands().throughput[0].model_dump())
    if change == "settings missing a key":
        del entry["settings"]["enforce_eager"]
    elif change == "gpu not a kind":
        entry["gpu"] = "H100 80GB"
    elif change == "value as text":
        entry["tokens_per_s_per_gpu"] = "2391"
    elif change == "id shared with an accuracy entry":
        entry["id"] = "curve"
    doc["throughput"] = [entry]
    return doc


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("settings missing a key", "throughput.0.settings.enforce_eager: Field required"),
        ("gpu not a kind", "throughput.0.gpu: String should match pattern"),
        ("value as text", "throughput.0.tokens_per_s_per_gpu: Input should be a valid number"),
        ("id shared with an accuracy entry", "duplicate id curve"),
    ],
)
def test_throughput_entries_are_validated_strictly(
    tmp_path: Path, change: str, message: str
) -> None:
    valid = _with_throughput("none")
    assert len(load_bands(write_doc(tmp_path, valid)).throughput) == 1  # negative control
    with pytest.raises(BandsError) as refused:
        load_bands(write_doc(tmp_path, _with_throughput(change)))
    assert message in str(refused.value)


def test_the_gpu_ray_detected_wins_over_the_overlays_declaration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """hardware/h100x1.yaml also serves an A100 80GB: on one, Ray's accelerator_type:A100
    resource is recorded, and the run is not set against the H100 entry."""
    import ray

    from rlvr.config.compose import compose

    config = compose("gsm8k_qwen2_5_0_5b_1gpu")
    assert references.plan_fields(config)["gpu"] == "H100 80GB"  # Ray not up: the declaration
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(
        ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 1.0, "accelerator_type:A100": 1.0}
    )
    fields = references.plan_fields(config)
    assert fields["gpu"] == "A100"
    assert throughput.matching_entry(load_bands(), fields["model"], fields["gpu"]) is None
    # two kinds (a mixed cluster) or none (CPU, fake GPUs): back to the declaration
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0, "GPU": 8.0})
    assert references.plan_fields(config)["gpu"] == "H100 80GB"

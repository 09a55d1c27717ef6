"""scripts/quickstart_report.py in-process on synthetic eval runs and a recorded GRPO run: the
"Held-out change" section near the top of report.md states the same intervals as
quickstart_report.json and whether they exclude zero (negative control: a change that goes both
ways says its interval includes zero), and the stage times scripts/stages.sh recorded come out
as a table and under new keys, beside every key the report had before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest
from script_loading import load_file_module
from test_paired import write_run

ROOT = Path(__file__).resolve().parents[1]
RECORDED_RUN = ROOT / "tests" / "data" / "report" / "quickstart_smollm2"
#: The keys quickstart_report.json had before the held-out section and the stage times; the
#: learning and quickstart tests read them, so they stay, with their values.
OLD_KEYS = {
    "experiment", "steps", "seconds", "probe_verdict", "sampled_pass1_before",
    "sampled_pass1_after", "sampled_pass1_delta", "sampled_pass1_delta_ci95",
    "sampled_pass1_gain_significant", "greedy_pass1", "format_rate", "sampled_score_delta",
    "sampled_score_delta_ci95", "sft_sampled_pass1", "alarms_fired", "greedy", "sampled", "sft",
    "sampling", "reward_curve", "runs",
}  # fmt: skip
STAGES = [
    {"stage": "data_prep_countdown", "seconds": 3.0, "status": 0},
    {"stage": "launch_sft", "seconds": 40.0, "status": 0},
    {"stage": "eval_countdown eval_grpo", "seconds": 7.0, "status": 0},
]


def load_script() -> ModuleType:
    return load_file_module("quickstart_report", ROOT / "scripts" / "quickstart_report.py")


def quickstart_out(
    tmp_path: Path, grpo_sampled: list[list[float]], base_prompts: int = 8
) -> tuple[Path, list[str]]:
    """An --out folder as the quickstart leaves it before its report (the base model probed on
    the first ``base_prompts`` prompts); the report's argv."""
    out = tmp_path / "out"
    ones = [[1.0] * 4 if i < 2 else [0.0] * 4 for i in range(8)]  # SFT: 2 of 8 prompts right
    runs = {
        "eval_base_sampled": ([[0.0] * 4] * base_prompts, 1.0),
        "eval_sft_sampled": (ones, 1.0),
        "eval_grpo_sampled": (grpo_sampled, 1.0),
        "eval_sft": ([[s[0]] for s in ones], 0.0),
        "eval_grpo": ([[s[0]] for s in grpo_sampled], 0.0),
    }
    for name, (scores, temperature) in runs.items():
        write_run(out / name, scores, temperature)
    run = out / "checkpoints" / "quickstart_smollm2"
    shutil.copytree(RECORDED_RUN, run)
    (out / "stage_times.jsonl").write_text("".join(json.dumps(s) + "\n" for s in STAGES))
    argv = ["--out", str(out), "--base", str(out / "eval_base_sampled")]
    argv += ["--greedy", str(out / "eval_sft"), str(out / "eval_grpo")]
    argv += ["--sampled", str(out / "eval_sft_sampled"), str(out / "eval_grpo_sampled")]
    argv += ["--metrics", str(run / "metrics.jsonl"), "--run", str(run), "--seconds", "60"]
    return out, argv


GAIN = [[1.0] * 4 if i < 6 else [0.0] * 4 for i in range(8)]  # 2 -> 6 of 8 prompts right
BOTH_WAYS = [[0.0] * 4, [1.0] * 4, [1.0] * 4, [0.0] * 4, [0.0] * 4, [0.0] * 4, [0.0] * 4, [0.0] * 4]


def _ci(interval: list[float]) -> str:
    low, high = interval
    return f"[{low * 100:+.2f}, {high * 100:+.2f}] pt"


@pytest.mark.parametrize(
    ("grpo", "excludes"), [(GAIN, True), (BOTH_WAYS, False)], ids=["gain", "both-ways"]
)
def test_report_md_states_the_held_out_change_of_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], grpo: list[list[float]], excludes: bool
) -> None:
    out, argv = quickstart_out(tmp_path, grpo)
    assert load_script().main(argv) == 0
    report = json.loads((out / "quickstart_report.json").read_text())
    assert report.keys() >= OLD_KEYS
    assert report["sampled_pass1_gain_significant"] is excludes
    text = (out / "checkpoints/quickstart_smollm2/report.md").read_text()
    section = text[text.index("## Held-out change: SFT -> GRPO") : text.index("## Alarms")]
    sampled, greedy = report["sampled_pass1_delta_ci95"], report["greedy_pass1"]["ci95"]
    assert f"95% CI {_ci(sampled)}" in section and f"95% CI {_ci(greedy)}" in section
    delta = f"{report['sampled_pass1_delta'] * 100:+.2f} pt"
    assert "- sampled pass@1 (n=4, temperature=1.0 per prompt): 25.00% -> " in section
    assert delta in section and "the held-out eval above is the measurement" in section.lower()
    said = "excludes zero: on these held-out prompts the GRPO model is right more often"
    assert (said in section) is excludes
    assert ("includes zero: this run shows no held-out change" in section) is not excludes
    headline = report["held_out_verdict"]
    assert headline in section and headline in capsys.readouterr().out


def test_the_seed_precision_and_the_training_rewards_quarters_are_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The quarters are recomputed here from the recorded run's metrics.jsonl (an independent
    read of the same lines): first and last len // 4 training steps, their means."""
    out, argv = quickstart_out(tmp_path, GAIN)
    assert load_script().main([*argv, "--seed", "7", "--grpo_precision", "bf16"]) == 0
    report = json.loads((out / "quickstart_report.json").read_text())
    assert report["seed"] == 7 and report["grpo_precision"] == "bf16"
    lines = (RECORDED_RUN / "metrics.jsonl").read_text().splitlines()
    scores = [r["data"]["critic/score/mean"] for r in map(json.loads, lines) if r["step"] > 0]
    quarter = len(scores) // 4
    first, last = sum(scores[:quarter]) / quarter, sum(scores[-quarter:]) / quarter
    assert report["training_score"] == pytest.approx(
        {
            "first_quarter": first,
            "last_quarter": last,
            "rise": last - first,
            "steps_per_quarter": quarter,
        }
    )
    assert f"first quarter {first:.3f} -> last quarter {last:.3f}" in capsys.readouterr().out


def test_stage_times_are_printed_and_added_with_their_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, argv = quickstart_out(tmp_path, GAIN)
    assert load_script().main(argv) == 0
    report = json.loads((out / "quickstart_report.json").read_text())
    rows = report["stage_seconds"]
    assert [(r["stage"], r["seconds"]) for r in rows] == [
        *((s["stage"], s["seconds"]) for s in STAGES),
        ("(outside the stages)", 10.0),  # --seconds 60 minus the stages' 50
    ]
    assert report["stage_seconds_total"] == 60.0 and rows[1]["share"] == pytest.approx(
        40 / 60, abs=1e-4
    )
    assert sum(r["share"] for r in rows) == pytest.approx(1.0, abs=1e-3)
    printed = capsys.readouterr().out
    assert "| launch_sft | 40.0 | 66.7% |" in printed and "| total | 60.0 | 100.0% |" in printed
    # write_run's summaries carry no timing (as before it was recorded): no rate, no crash
    assert set(report["eval_tokens_per_second"].values()) == {None}


def test_without_stage_times_the_report_still_stands(tmp_path: Path) -> None:
    out, argv = quickstart_out(tmp_path, GAIN)
    (out / "stage_times.jsonl").unlink()
    assert load_script().main(argv) == 0
    report = json.loads((out / "quickstart_report.json").read_text())
    assert report["stage_seconds"] == [{"stage": "(outside the stages)", "seconds": 60.0,
                                        "share": 1.0, "status": 0}]  # fmt: skip


def test_a_damaged_stage_times_file_is_noted_and_the_report_stands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, argv = quickstart_out(tmp_path, GAIN)
    (out / "stage_times.jsonl").write_text('{"stage": "cut sho\n')
    assert load_script().main(argv) == 0
    report = json.loads((out / "quickstart_report.json").read_text())
    assert "stage_seconds" not in report and report["sampled_pass1_gain_significant"] is True
    err = capsys.readouterr().err
    assert err.startswith("no stage times: ") and "stage_times.jsonl line 1: not a stage" in err


def test_sfts_own_gain_is_over_the_base_probes_prompts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The quickstart probes the base model on the first 32 of its 96 prompts: SFT's own gain is
    paired over those (here the first 4 of 8: SFT solves 2 of them), the GRPO headline over all."""
    out, argv = quickstart_out(tmp_path, GAIN, base_prompts=4)
    assert load_script().main(argv) == 0
    report = json.loads((out / "quickstart_report.json").read_text())
    sft = {row["metric"]: row for row in report["sft"]}["success"]
    assert sft["prompts"] == 4 and sft["after"] == pytest.approx(0.5)
    assert report["sampled_pass1_before"] == pytest.approx(0.25)  # SFT over all 8
    assert "sampled, 4 of those prompts" in capsys.readouterr().out

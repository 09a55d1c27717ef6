"""``eval_countdown.py compare``: paired 95% intervals for the per-prompt means, checked against
scipy's paired t test, and one-line refusals of runs that differ in anything but the model."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from scipy import stats

from rlvr.evaluation import cli as eval_cli
from rlvr.evaluation.prompts import fingerprints
from rlvr.evaluation.records import GradedSample, RunHeader, Summary, write_jsonl

SAMPLING: dict[str, Any] = {
    "n": 2,
    "temperature": 1.0,
    "top_p": 1.0,
    "max_tokens": 32,
    "seed": 0,
    "ignore_eos": False,
}
# per prompt, two samples' scores: 1.0 solved, 0.1 formatted but wrong, 0.0 neither
BASE = [[0.0, 0.1], [0.1, 0.1], [0.0, 0.0], [1.0, 0.0], [0.1, 0.0], [0.0, 0.0]]
TRAINED = [[1.0, 1.0], [0.1, 1.0], [0.1, 0.0], [1.0, 1.0], [1.0, 0.1], [0.1, 1.0]]


def _rows(prompt: str = "Using the numbers {n}, make {t}") -> list[dict[str, Any]]:
    return [
        {
            "prompt": [{"role": "user", "content": prompt.format(n=[i, 10], t=10 + i)}],
            "reward_model": {"ground_truth": {"target": 10 + i, "numbers": [i, 10]}},
        }
        for i in range(len(BASE))
    ]


def write_run(
    folder: Path,
    scores: Sequence[Sequence[float]],
    rows: list[dict[str, Any]] | None = None,
    **changes: Any,
) -> str:
    """A complete run folder; ``changes`` replace sampling keys (or header keys, by name)."""
    rows = rows or _rows()
    sampling = {k: changes.pop(k, v) for k, v in SAMPLING.items()}
    header = RunHeader(
        command="analyse",
        task="countdown",
        model=folder.name,
        data="test.parquet",
        prompts=len(scores),
        backend="hf",
        sampling=sampling,
        reward_kwargs={"format_score": 0.1, "shaping": False},
        **{
            "template_kwargs": {},
            **fingerprints(rows, [[1, 2, len(str(r["prompt"]))] for r in rows]),
            **changes,
        },
    )
    samples = [
        GradedSample(
            prompt_index=i,
            sample=j,
            ground_truth=rows[i]["reward_model"]["ground_truth"],
            prompt_tokens=3,
            response="r",
            response_tokens=4,
            finish_reason="stop",
            parts={"score": score, "format": float(score > 0)},
        )
        for i, group in enumerate(scores)
        for j, score in enumerate(group)
    ]
    flat = [s.score for s in samples]
    metrics = {
        "mean_score": sum(flat) / len(flat),
        "pass@1": sum(x == 1.0 for x in flat) / len(flat),
        "format_rate": sum(x > 0 for x in flat) / len(flat),
    }
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(Summary(header, metrics).to_json()))
    write_jsonl(folder / "samples.jsonl", (s.to_json() for s in samples))
    return str(folder)


def compare(base: str, trained: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = eval_cli.main("countdown", "t", ["compare", base, trained])
    out, err = capsys.readouterr()
    return code, out, err


def _scipy_interval(before: list[float], after: list[float]) -> tuple[float, float]:
    """An independent computation: scipy's paired t test over the per-prompt means."""
    ci = stats.ttest_rel(after, before).confidence_interval(0.95)
    return float(ci.low), float(ci.high)


def _means(scores: Sequence[Sequence[float]], value: Any) -> list[float]:
    return [sum(map(value, group)) / len(group) for group in scores]


@pytest.mark.parametrize(
    ("label", "value"),
    [
        ("pass@1", lambda s: float(s == 1.0)),
        ("format rate", lambda s: float(s > 0)),
        ("mean score", lambda s: s),
    ],
)
def test_intervals_match_scipys_paired_t_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], label: str, value: Any
) -> None:
    code, out, err = compare(
        write_run(tmp_path / "base", BASE), write_run(tmp_path / "trained", TRAINED), capsys
    )
    assert code == 0, err
    low, high = _scipy_interval(_means(BASE, value), _means(TRAINED, value))
    row = next(line for line in out.splitlines() if line.startswith(f"| {label} |"))
    star = " *" if low > 0 or high < 0 else ""
    assert row.endswith(f"| [{low * 100:+.2f}, {high * 100:+.2f}] pt{star} |"), row
    assert "over 6 prompts" in out
    assert "both: sampled, n=2, temperature=1.0, top_p=1.0, max_tokens=32, seed=0 on the" in out


def test_a_clear_gain_excludes_zero_and_a_wash_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_run(tmp_path / "base", BASE)
    _, out, _ = compare(base, write_run(tmp_path / "trained", TRAINED), capsys)
    assert "- pass@1 (success rate): +50.00 pt" in out
    assert "excludes zero: a gain on these prompts" in out
    _, same, _ = compare(base, write_run(tmp_path / "again", BASE), capsys)  # negative control
    assert "| pass@1 | 8.33% | 8.33% | +0.00 pt | [+0.00, +0.00] pt |" in same
    assert "interval excludes zero:" not in same and "includes zero: no change" in same


def test_runs_on_the_same_settings_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Negative control for the refusals: same prompts and settings, a different model; and
    greedy runs whose seed differs (it cannot change a greedy response)."""
    code, out, err = compare(
        write_run(tmp_path / "base", BASE), write_run(tmp_path / "trained", TRAINED), capsys
    )
    assert (code, err) == (0, "") and "warning" not in out
    greedy = {"temperature": 0.0, "n": 1}
    one = [[g[0]] for g in BASE]
    code, out, err = compare(
        write_run(tmp_path / "g0", one, **greedy),
        write_run(tmp_path / "g1", one, **greedy, seed=7),
        capsys,
    )
    assert code == 0, err
    summary = json.loads((tmp_path / "g1/summary.json").read_text())
    del summary["sampling"]["seed"]  # as an old greedy run might lack it
    (tmp_path / "g1/summary.json").write_text(json.dumps(summary))
    code, out, err = compare(str(tmp_path / "g0"), str(tmp_path / "g1"), capsys)
    assert code == 0 and "warning: TRAINED records no seed (greedy: it cannot matter)" in out, err


REFUSALS = [
    # (name, the trained run's changes, what the one line names)
    ("prompts", {"rows": _rows("Make {t} from {n}")}, "different prompts (the data's prompt"),
    ("max tokens", {"max_tokens": 64}, "max_tokens 32 vs 64"),
    ("temperature", {"temperature": 0.7}, "temperature 1.0 vs 0.7"),
    ("top_p", {"top_p": 0.9}, "top_p 1.0 vs 0.9"),
    ("samples per prompt", {"n": 4}, "n 2 vs 4"),
    ("seed when sampling", {"seed": 1}, "seed 0 vs 1"),
    ("chat template", {"rendered_sha256": "0" * 64}, "prompts rendered differently"),
    ("template kwargs", {"template_kwargs": {"enable_thinking": False}}, "chat template kwargs"),
    ("old record", {"prompts_sha256": None}, "TRAINED {trained} records no prompts_sha256"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "named"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_runs_that_differ_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any], named: str
) -> None:
    changes = dict(changes)
    n = changes.get("n", 2)
    scores = [[s[0]] * n for s in TRAINED]
    trained = write_run(tmp_path / "trained", scores, changes.pop("rows", None), **changes)
    code, out, err = compare(write_run(tmp_path / "base", BASE), trained, capsys)
    assert code == 2 and out == "", out
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert named.format(trained=trained) in err, err


def test_an_old_run_without_a_seed_is_refused_when_sampling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = write_run(tmp_path / "old", BASE)
    summary = json.loads(Path(old, "summary.json").read_text())
    del summary["sampling"]["seed"]
    Path(old, "summary.json").write_text(json.dumps(summary))
    code, _, err = compare(old, write_run(tmp_path / "new", TRAINED), capsys)
    assert code == 2 and f"BASE {old} records no sampling.seed" in err, err


def test_one_prompt_compares_without_an_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows()[:1]
    code, out, err = compare(
        write_run(tmp_path / "base", BASE[:1], rows),
        write_run(tmp_path / "t", TRAINED[:1], rows),
        capsys,
    )
    assert code == 0, err
    assert "| pass@1 | 0.00% | 100.00% | +100.00 pt | - |" in out
    assert "warning: one prompt: no interval" in out and "95% CI [" not in out


@pytest.mark.parametrize(
    "low,high,said",
    [
        (0.01, 0.09, "excludes zero: on these held-out prompts the GRPO model is right more often"),
        (
            -0.09,
            -0.01,
            "excludes zero: on these held-out prompts the GRPO model is right less often",
        ),
        (-0.01, 0.09, "includes zero: this run shows no held-out change in pass@1 that 96 prompts"),
    ],
)
def test_interval_verdict_says_which_way(low: float, high: float, said: str) -> None:
    from rlvr.evaluation.paired import Interval
    from rlvr.evaluation.statistics import interval_verdict

    verdict = interval_verdict("pass@1", Interval((low + high) / 2, low, high, 96), "GRPO")
    assert verdict.startswith("The 95% interval of pass@1 ") and said in verdict

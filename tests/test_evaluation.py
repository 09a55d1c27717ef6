"""The eval engine and CLI: verl-identical prompts, every command, outputs, run folders that
never mix two runs, and bad input."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from rlvr import tasks
from rlvr.evaluation import EvalError, grading, metrics, pipeline, records, settings, statistics
from rlvr.evaluation import cli as eval_cli
from rlvr.evaluation import run_folder as outputs
from rlvr.evaluation.generation import Generation
from rlvr.evaluation.prompts import fingerprints, load_rows, render_prompt
from rlvr.evaluation.settings import SamplingSettings

ROOT = Path(__file__).resolve().parents[1]
SAMPLED = SamplingSettings(n=4, temperature=1.0)
PASS_AT_1_2_4 = ["pass@1", "pass@2", "pass@4"]
MAJ_AT_1_2_4 = ["maj@1", "maj@2", "maj@4"]


def test_eval_renders_the_prompt_tokens_verl_trains_on(countdown_data: Path, tiny_tokenizer):
    """Same Parquet, same tokenizer, same template kwargs: eval's ids == RLHFDataset's ids."""
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    template_kwargs = {"enable_thinking": False}
    config = OmegaConf.create(
        {
            "max_prompt_length": 512,
            "truncation": "error",
            "filter_overlong_prompts": False,
            "apply_chat_template_kwargs": template_kwargs,
        }
    )
    dataset = RLHFDataset(data_files=str(countdown_data), tokenizer=tiny_tokenizer, config=config)
    rows = load_rows(countdown_data)
    assert len(dataset) == len(rows)
    for index, row in enumerate(rows):
        ours = render_prompt(tiny_tokenizer, row["prompt"], **template_kwargs)
        assert ours == list(dataset[index]["raw_prompt_ids"])


class ScriptedBackend:
    """Plays fixed responses (by prompt) through the real grading path; generation is the only
    part replaced, so every metric can be checked against hand-computed values. With
    ``fail_on_call`` it raises on that call to ``generate``, like a backend dying mid-run."""

    name = "scripted"

    def __init__(self, tokenizer, responses: dict[int, list[str]], rows, fail_on_call=0) -> None:
        self.tokenizer = tokenizer
        self.by_prompt = {
            tuple(render_prompt(tokenizer, row["prompt"])): responses[row["_index"]] for row in rows
        }
        self.calls, self.fail_on_call = 0, fail_on_call

    def generate(self, prompts, sampling: SamplingSettings):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("the backend fell over")
        out = []
        for ids in prompts:
            texts = self.by_prompt[tuple(ids)]
            assert len(texts) == sampling.n
            out.append([Generation(t, 10, "stop", [-0.5] * 10) for t in texts])
        return out


def _valid_wrong(row) -> str:
    """An expression over the row's numbers, each used once, that misses its target."""
    from rewards.countdown import evaluate

    truth = row["reward_model"]["ground_truth"]
    numbers, target = [int(n) for n in truth["numbers"]], int(truth["target"])
    for op in "+*-":
        expr = f" {op} ".join(map(str, numbers))
        value = evaluate(expr, numbers)
        if value is not None and value[0] != target * value[1]:
            return f"<answer>{expr}</answer>"
    raise AssertionError(f"no wrong expression for {truth}")


def _responses(rows) -> dict[int, list[str]]:
    """Prompt 0: 4/4 correct; 1: 2/4; 2: 1/4 plus the same valid wrong value twice (it wins
    the 4-vote); 3..: nothing right."""
    right = [f"<answer>{row['extra_info']['solution']}</answer>" for row in rows]
    garbage = "no idea"
    wrong = _valid_wrong(rows[2])
    scripted = {
        0: [right[0]] * 4,
        1: [right[1], garbage, right[1], garbage],
        2: [right[2], wrong, wrong, garbage],
    }
    return {i: scripted.get(i, [garbage] * 4) for i in range(len(rows))}


def _scripted_run(
    output: Path, data: Path, tokenizer, fail_on_call: int = 0, force: bool = False
) -> grading.EvalRun:
    rows = load_rows(data)
    return grading.EvalRun(
        task=tasks.get("countdown"),
        model_path="scripted",
        data_path=str(data),
        output_dir=output,
        backend=ScriptedBackend(tokenizer, _responses(rows), rows, fail_on_call),
        reward_kwargs={"format_score": 0.1},
        prompts_per_chunk=4,
        progress=False,
        force=force,
    )


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_analyse_by_hand(tmp_path: Path, countdown_data: Path, tiny_tokenizer) -> None:
    run = _scripted_run(tmp_path / "run", countdown_data, tiny_tokenizer)
    summary = pipeline.evaluate("analyse", run, load_rows(countdown_data), SAMPLED)
    found = summary.metrics
    # success rates 1, .5, .25, 0, 0, 0 over 6 prompts
    assert found["accuracy"] == pytest.approx(1.75 / 6)
    prompt2 = [1.0, 0.1, 0.1, 0.0]  # one right, two well-formed wrong (format score), one empty
    expected_variance = (0.0 + 0.25 + metrics.variance(prompt2)) / 6
    assert found["mean_variance"] == pytest.approx(expected_variance)
    assert found["nonzero_variance_fraction"] == pytest.approx(2 / 6)
    assert found["learnable_fraction"] == pytest.approx(2 / 6)  # prompts 1 and 2
    assert found["mean_outcome_entropy"] == pytest.approx((1.0 + 0.8112781244591328) / 6)
    assert found["mean_token_entropy"] == pytest.approx(0.5)
    assert summary.verdict is not None and summary.verdict.label == "ready_for_grpo"
    prompts = _read_jsonl(run.output_dir / "prompts.jsonl")
    assert [r["success_rate"] for r in prompts] == [1.0, 0.5, 0.25, 0.0, 0.0, 0.0]
    samples = _read_jsonl(run.output_dir / "samples.jsonl")
    assert len(samples) == 24 and "logprobs" not in samples[0]
    assert list(samples[0])[:8] == [
        "prompt_index", "sample", "ground_truth", "prompt_tokens", "response",
        "response_tokens", "finish_reason", "mean_neg_logprob",
    ]  # fmt: skip
    assert {"score", "format"} <= samples[0].keys()  # the reward's parts
    line = json.dumps(samples[0])
    assert records.parse(records.GradedSample, line, "samples.jsonl").to_json() == samples[0]
    assert "**Verdict: ready_for_grpo.**" in (run.output_dir / "summary.md").read_text()
    on_disk = json.loads((run.output_dir / "summary.json").read_text())
    assert on_disk == summary.to_json() and on_disk["verdict"] == "ready_for_grpo"
    assert records.load_summary(run.output_dir) == summary  # the typed record round-trips
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging left behind


def test_passk_and_reward_by_hand(tmp_path: Path, countdown_data: Path, tiny_tokenizer) -> None:
    run = _scripted_run(tmp_path / "passk", countdown_data, tiny_tokenizer)
    rows = load_rows(countdown_data)
    summary = pipeline.evaluate("passk", run, rows, SAMPLED, [1, 2, 4])
    counts = [4, 2, 1, 0, 0, 0]
    for k in (1, 2, 4):
        expected = sum(metrics.pass_at_k(4, c, k) for c in counts) / 6
        assert summary.metrics[f"pass@{k}"] == pytest.approx(expected)
    assert summary.metrics["pass@4"] == pytest.approx(3 / 6)
    assert summary.metrics["format_rate"] == pytest.approx(9 / 24)
    # maj@k by hand (garbage abstains): prompt 0 always right; prompt 1 wrong only when both
    # drawn samples abstain (1 of 6 pairs); prompt 2 (right, wrong, wrong, none): maj@2 = 2 R+W
    # ties at 1/2 + 1 R+none of 6 pairs, maj@4 = 0 since the wrong value has two votes.
    expected_maj = {1: 1.75 / 6, 2: (1 + 5 / 6 + 1 / 3) / 6, 4: 2 / 6}
    for k, expected in expected_maj.items():
        assert summary.metrics[f"maj@{k}"] == pytest.approx(expected)
    prompts = _read_jsonl(run.output_dir / "prompts.jsonl")
    assert list(prompts[0]) == [
        "prompt_index", "ground_truth", "n", "successes", *PASS_AT_1_2_4, *MAJ_AT_1_2_4
    ]  # fmt: skip
    assert (prompts[2]["pass@4"], prompts[2]["maj@4"]) == (1.0, 0.0)
    samples = _read_jsonl(run.output_dir / "samples.jsonl")
    target = str(rows[2]["reward_model"]["ground_truth"]["target"])
    assert [s["answer_key"] for s in samples[8:12]][::3] == [target, None]  # right, garbage
    assert samples[9]["answer_key"] == samples[10]["answer_key"] not in (target, None)
    table = (run.output_dir / "summary.md").read_text()
    assert table.index("| pass@4 |") < table.index("| maj@1 |") < table.index("| maj@4 |")
    assert records.load_summary(run.output_dir) == summary
    with pytest.raises(EvalError, match="between 1 and"):
        pipeline.evaluate("passk", run, rows, SamplingSettings(n=4), [8])

    run.backend.by_prompt = {k: v[:1] for k, v in run.backend.by_prompt.items()}
    greedy = pipeline.evaluate(
        "reward", replace(run, output_dir=tmp_path / "reward"), rows, SAMPLED
    )
    assert greedy.header.sampling["n"] == 1 and greedy.header.sampling["temperature"] == 0.0
    assert greedy.metrics["pass@1"] == pytest.approx(3 / 6)  # first responses: right x3
    assert greedy.metrics["mean_score"] == pytest.approx(3 / 6)


def test_a_reward_without_answer_key_reports_no_maj_at_k(
    tmp_path: Path, countdown_data: Path, tiny_tokenizer
) -> None:
    """maj@k is optional: a reward file with compute_score alone still runs passk, as before."""
    plain = tmp_path / "plain_reward.py"
    plain.write_text("from rewards.countdown import compute_score  # noqa: F401\n")
    task = tasks.get("countdown")
    assert task.load_answer_key() is not None  # the negative control: the shipped reward has one
    without = replace(task, reward_file=plain)
    assert without.load_answer_key() is None
    run = replace(_scripted_run(tmp_path / "run", countdown_data, tiny_tokenizer), task=without)
    rows = load_rows(countdown_data)
    summary = pipeline.evaluate("passk", run, rows, SAMPLED, [1, 2, 4])
    assert not [key for key in summary.metrics if key.startswith("maj@")]
    assert summary.metrics["pass@4"] == pytest.approx(3 / 6)
    first = _read_jsonl(run.output_dir / "prompts.jsonl")[0]
    assert list(first) == ["prompt_index", "ground_truth", "n", "successes", *PASS_AT_1_2_4]
    assert "answer_key" not in _read_jsonl(run.output_dir / "samples.jsonl")[0]
    assert "maj@" not in (run.output_dir / "summary.md").read_text()


def test_stats_filter_and_compare(tmp_path: Path, countdown_data: Path, tiny_tokenizer) -> None:
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    run = _scripted_run(tmp_path / "run", countdown_data, tiny_tokenizer)
    summary = pipeline.evaluate("analyse", run, load_rows(countdown_data), SAMPLED)
    prompts, _ = outputs.load_prompt_records(run.output_dir)
    chosen = metrics.high_value_prompts(prompts, 0.05, 0.2)
    assert [r.prompt_index for r in chosen] == [1, 2]  # highest variance first
    assert "2 of 6 prompts" in statistics.stats_markdown(prompts, chosen, 0.05, 0.2, 20)

    target = tmp_path / "learnable.parquet"
    assert outputs.filter_learnable(run.output_dir, target, 0.05, 0.2) == (2, 6)
    written = pd.read_parquet(target)
    source = pd.read_parquet(countdown_data)
    assert written["extra_info"].map(lambda e: e["solution"]).tolist() == [
        source.iloc[i]["extra_info"]["solution"] for i in (1, 2)
    ]
    config = OmegaConf.create({"max_prompt_length": 512, "filter_overlong_prompts": False})
    assert len(RLHFDataset(str(target), tiny_tokenizer, config)) == 2  # ready for training
    with pytest.raises(EvalError, match=r"--output .*learnable.parquet already exists.*--force"):
        outputs.filter_learnable(run.output_dir, target, 0.5, 0.2)
    assert outputs.filter_learnable(run.output_dir, target, 0.2, 0.2, force=True) == (1, 6)
    assert len(pd.read_parquet(target)) == 1

    # A regenerated data file must not silently select different rows.
    pd.concat([source.iloc[[3]], source]).reset_index(drop=True).to_parquet(countdown_data)
    try:
        with pytest.raises(EvalError, match="data file changed"):
            outputs.filter_learnable(run.output_dir, tmp_path / "other.parquet", 0.05, 0.2)
        assert not (tmp_path / "other.parquet").exists()
    finally:
        source.to_parquet(countdown_data)
    # A data file moved since the probe: one line naming it, not pyarrow's traceback.
    moved = countdown_data.rename(tmp_path / "moved.parquet")
    try:
        with pytest.raises(EvalError, match=r"the analyse run's data .*: no such file"):
            outputs.filter_learnable(run.output_dir, tmp_path / "other.parquet", 0.05, 0.2)
    finally:
        moved.rename(countdown_data)

    base = replace(summary, header=summary.header.model_copy(update={"model": "base"}))
    better = {**base.metrics, "mean_score": (base.metrics["mean_score"] or 0.0) + 0.25}
    trained_header = base.header.model_copy(update={"model": "trained"})
    trained = replace(base, header=trained_header, metrics=better)
    table = statistics.compare_markdown(base, trained)
    assert "| mean score |" in table and "+25.00 pt" in table
    assert "same prompts" not in table


def test_a_run_records_its_wall_time_and_tokens(tmp_path: Path, countdown_data, tiny_tokenizer):
    """summary.json's "timing": the run's wall seconds and the tokens it generated (the sum of
    samples.jsonl's response_tokens), so tokens/s can be computed; not a metric."""
    run = _scripted_run(tmp_path / "passk", countdown_data, tiny_tokenizer)
    summary = pipeline.evaluate("passk", run, load_rows(countdown_data), SAMPLED, [1])
    timing = json.loads((run.output_dir / "summary.json").read_text())["timing"]
    samples = _read_jsonl(run.output_dir / "samples.jsonl")
    assert timing["generated_tokens"] == sum(s["response_tokens"] for s in samples) > 0
    assert timing["generation_seconds"] == run.generation_seconds > 0
    assert "timing" not in summary.metrics and "generation_seconds" not in summary.metrics
    assert summary.tokens_per_second == timing["generated_tokens"] / timing["generation_seconds"]
    assert records.load_summary(run.output_dir) == summary
    stopped = summary.timed(0.0, [])  # a zero time gives no rate, not a division by zero
    assert stopped.tokens_per_second is None and stopped.extra["timing"]["generated_tokens"] == 0


# A summary.json and a prompts.jsonl line as earlier versions wrote them.
OLD_SUMMARY = {
    "command": "analyse", "task": "countdown", "model": "/m/global_step_4/actor/huggingface",
    "data": "/d/countdown/test.parquet", "prompts": 2, "backend": "hf",
    "sampling": {"n": 4, "temperature": 1.0, "top_p": 1.0, "max_tokens": 48, "seed": 0,
                 "ignore_eos": False},
    "reward_kwargs": {"format_score": 0.1, "shaping": False}, "template_kwargs": {},
    "mean_score": 0.3, "pass@1": 0.25, "format_rate": 0.5, "mean_response_tokens": 16.0,
    "truncated_rate": 0.0, "accuracy": 0.25, "mean_variance": 0.125,
    "nonzero_variance_fraction": 0.5, "learnable_fraction": 0.5, "mean_outcome_entropy": 0.5,
    "mean_token_entropy": None, "verdict": "marginal", "advice": "marginal (...)",
    "checks": {"accuracy in 10-80%": True, "variance > 0.05": True, "entropy in 0.2-0.8": True},
}  # fmt: skip
OLD_PROMPT = {
    "prompt_index": 1, "n": 4, "mean_score": 0.5, "success_rate": 0.5, "variance": 0.25,
    "outcome_entropy": 1.0, "token_entropy": None, "ground_truth": {"target": 7},
}  # fmt: skip


def test_old_run_folders_still_load(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps(OLD_SUMMARY, indent=2))
    (tmp_path / "prompts.jsonl").write_text(json.dumps(OLD_PROMPT) + "\n")
    summary = records.load_summary(tmp_path)
    assert summary.to_json() == OLD_SUMMARY and list(summary.to_json()) == list(OLD_SUMMARY)
    assert summary.header.sampling["n"] == 4 and summary.metrics["mean_token_entropy"] is None
    assert summary.tokens_per_second is None  # written before the timing was recorded
    assert summary.verdict is not None and summary.verdict.checks["variance > 0.05"]
    assert "mean token entropy" not in outputs.summary_markdown(summary)
    assert "| pass@1 | 25.00% | 25.00% | +0.00 pt |" in statistics.compare_markdown(
        summary, summary
    )
    prompts, _ = outputs.load_prompt_records(tmp_path)
    assert prompts[0].to_json() == OLD_PROMPT and metrics.high_value_prompts(prompts, 0.05, 0.2)
    unknown = {**OLD_SUMMARY, "notes": "kept", "step": 4}  # a later version's keys survive
    assert records.Summary.from_json(json.dumps(unknown)).to_json() == unknown
    without_model = json.dumps({k: v for k, v in OLD_SUMMARY.items() if k != "model"})
    with pytest.raises(EvalError, match=r"^summary.json: 'model': Field required$"):
        records.Summary.from_json(without_model)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_failed_or_refused_run_leaves_the_previous_folder_intact(
    tmp_path: Path, countdown_data: Path, tiny_tokenizer, capsys
) -> None:
    rows = load_rows(countdown_data)
    output = tmp_path / "run"
    pipeline.evaluate(
        "analyse", _scripted_run(output, countdown_data, tiny_tokenizer), rows, SAMPLED
    )
    before = _snapshot(output)
    assert sorted(before) == ["prompts.jsonl", "samples.jsonl", "summary.json", "summary.md"]

    refused = _scripted_run(output, countdown_data, tiny_tokenizer)
    with pytest.raises(EvalError, match=r"^--output .*/run already exists; pass --force"):
        pipeline.evaluate("reward", refused, rows, SAMPLED)
    assert refused.backend.calls == 0 and _snapshot(output) == before

    # --force, and the backend dies on its second chunk (prompts 4-5): the old run stays whole.
    dying = _scripted_run(output, countdown_data, tiny_tokenizer, fail_on_call=2, force=True)
    with pytest.raises(RuntimeError, match="fell over"):
        pipeline.evaluate("analyse", dying, rows, SAMPLED)
    assert _snapshot(output) == before
    staging = outputs.staging_dir(output)
    assert sorted(p.name for p in tmp_path.iterdir()) == [staging.name, "run"]
    assert staging.name == f".run.partial-{os.getpid()}"
    assert len(_read_jsonl(staging / "samples.jsonl")) == 16  # the first chunk, 4 prompts x 4
    assert not (staging / "summary.json").exists()
    assert f"{output} is unchanged" in capsys.readouterr().err

    # A run that completes replaces the folder whole (and reuses its pid's staging name).
    replaced = _scripted_run(output, countdown_data, tiny_tokenizer, force=True)
    pipeline.evaluate("passk", replaced, rows, SAMPLED, [1, 4])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert sorted(_snapshot(output)) == sorted(before)
    assert records.load_summary(output).header.command == "passk"

    # --force replaces eval run folders only, never another folder.
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("keep")
    with pytest.raises(EvalError, match="not an eval run folder"):
        pipeline.evaluate("reward", replace(replaced, output_dir=notes), rows, SAMPLED)
    assert _snapshot(notes) == {"todo.txt": b"keep"}


def _namespace(argv: list[str]) -> argparse.Namespace:
    return eval_cli.parse(eval_cli.build_parser("countdown", "d"), argv)


def _parse(argv: list[str]) -> dict:
    return vars(_namespace(argv))


def test_options_before_or_after_the_command() -> None:
    after = _parse(["analyse", "--model_path", "M", "--limit", "3", "--n", "5"])
    assert after == _parse(["--model_path", "M", "--limit", "3", "analyse", "--n", "5"])
    assert after == _parse(["--model_path=M", "analyse", "--limit", "3", "--rollout_n", "5"])
    assert after == _parse(["--model", "M", "--lim", "3", "analyse", "--n", "5"])  # prefixes
    assert after["n"] == 5 and after["seed"] == 0 and after["backend"] == "auto"
    assert _parse(["passk"])["n"] == _parse(["analyse"])["n"] == 16
    assert _parse(["--model_path", "M"])["command"] == "reward"  # the default command
    assert _parse([])["command"] == "reward"
    # an option's value that names a command is still the value
    assert _parse(["--output", "passk", "--quiet", "analyse"])["output"] == "passk"
    # after the command wins; a run command's own --output may come first
    assert _parse(["--limit", "3", "reward", "--limit", "4"])["limit"] == 4
    assert _parse(["--output", "t.md", "compare", "a", "b"])["output"] == "t.md"
    assert _parse(["compare", "a", "b"])["output"] is None
    assert _parse(["--output", "f.parquet", "filter", "--input", "r"])["output"] == "f.parquet"
    # a command's own options (sampling: --n, --temperature, --k) come after it
    bad_lines = (["reward", "--n", "3"], ["passk", "--rollout_n", "3"], ["nonsense"])
    refused = (["--limit", "3", "stats", "--input", "r"], ["--n", "3", "passk"])
    for bad in (*bad_lines, *refused, ["filter", "--input", "r"]):
        with pytest.raises(SystemExit):
            _parse(bad)


def test_cli_help_explains_every_flag(capsys) -> None:
    parser = eval_cli.build_parser("countdown", "d")
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    assert sorted(subparsers) == sorted(eval_cli.COMMANDS)
    for sub in subparsers.values():
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, action.option_strings
    for argv in (["--help"], *([c, "--help"] for c in eval_cli.COMMANDS)):
        with pytest.raises(SystemExit) as done:
            eval_cli.main("countdown", "d", argv)
        assert done.value.code == 0 and "usage:" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        eval_cli.main("countdown", "d", ["analyse", "--help"])
    assert "--rollout_n is an alias" in " ".join(capsys.readouterr().out.split())


def test_cli_every_command_on_the_tiny_model(
    tmp_path: Path, countdown_data: Path, tiny_model_dir: Path, capsys
) -> None:
    def cli(*args: str) -> tuple[int, str, str]:
        code = eval_cli.main("countdown", "test", list(args))
        out, err = capsys.readouterr()
        return code, out, err

    common = ["--model_path", str(tiny_model_dir), "--data", str(countdown_data), "--quiet"]
    common += ["--backend", "hf"]  # auto picks vLLM where there is CUDA
    common += ["--max_tokens", "8", "--limit", "4"]
    # no command given: reward
    code, out, err = cli(*common, "--output", str(tmp_path / "reward"))
    assert code == 0, err
    assert "# countdown reward" in out and "| pass@1 |" in out
    code, _, err = cli("passk", *common, "--n", "4", "--output", str(tmp_path / "passk"))
    assert code == 0, err
    summary = json.loads((tmp_path / "passk/summary.json").read_text())
    assert {"pass@1", "pass@4", "maj@1", "maj@4"} <= summary.keys() and summary["prompts"] == 4
    assert summary["maj@1"] == pytest.approx(summary["pass@1"])  # both: the success rate
    assert summary["reward_kwargs"] == {"format_score": 0.1, "shaping": False}  # training's
    code, out, err = cli(*common, "--output", str(tmp_path / "an"), "analyse", "--rollout_n", "3")
    assert code == 0, err
    assert "Verdict: sft_first" in out  # a random model never solves Countdown
    assert len((tmp_path / "an/samples.jsonl").read_text().splitlines()) == 12
    code, out, _ = cli("stats", "--input", str(tmp_path / "an"))
    assert code == 0 and "0 of 4 prompts" in out
    code, _, err = cli("filter", "--input", str(tmp_path / "an"), "--output", str(tmp_path / "f"))
    assert code == 2 and "nothing to write" in err
    table = tmp_path / "table.md"
    mixed = ["compare", str(tmp_path / "reward"), str(tmp_path / "passk/summary.json")]
    code, _, err = cli(*mixed)  # greedy n=1 against sampled n=4: not the model's difference
    assert code == 2 and "sample differently: n 1 vs 4" in err and not table.exists()
    compare = ["compare", str(tmp_path / "reward"), str(tmp_path / "reward/summary.json")]
    code, out, _ = cli(*compare, "--output", str(table))
    assert code == 0 and "| mean score |" in out and table.read_text() == out
    assert "| pass@1 | 0.00% | 0.00% | +0.00 pt | [+0.00, +0.00] pt |" in out
    table.write_text("mine")
    code, _, err = cli(*compare, "--output", str(table))
    assert code == 2 and "--output" in err and "--force" in err and table.read_text() == "mine"
    assert cli(*compare, "--output", str(table), "--force")[0] == 0 and table.read_text() == out
    code, _, err = cli(*compare, "--output", str(tmp_path / "an"), "--force")
    assert code == 2 and "is a folder" in err


def test_cli_refuses_an_existing_output_unless_forced(
    tmp_path: Path, countdown_data: Path, tiny_model_dir: Path, capsys
) -> None:
    output = tmp_path / "run"
    argv = ["--model_path", str(tiny_model_dir), "--data", str(countdown_data), "--quiet"]
    argv += ["--max_tokens", "2", "--limit", "2", "--output", str(output)]
    assert eval_cli.main("countdown", "t", argv) == 0
    before = _snapshot(output)
    capsys.readouterr()
    assert eval_cli.main("countdown", "t", [*argv, "--limit", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--output {output} already exists" in err and "--force" in err
    assert _snapshot(output) == before
    assert eval_cli.main("countdown", "t", ["--force", *argv, "--limit", "3"]) == 0
    assert records.load_summary(output).header.prompts == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_greedy_output_writes_the_run_reward_alone_writes(
    tmp_path: Path, countdown_data: Path, tiny_model_dir: Path, capsys
) -> None:
    """``analyse --greedy_output G`` = ``analyse`` + ``reward --output G``, in one process: the
    same samples and summary, byte for byte but the wall time; refused where it cannot be."""
    argv = ["--model_path", str(tiny_model_dir), "--data", str(countdown_data), "--quiet"]
    argv += ["--max_tokens", "3", "--limit", "3", "--batch_size", "2"]
    greedy, alone = tmp_path / "greedy", tmp_path / "alone"
    sampled = ["analyse", "--n", "2", "--output", str(tmp_path / "sampled")]
    assert eval_cli.main("countdown", "t", [*argv, *sampled, "--greedy_output", str(greedy)]) == 0
    assert f"greedy run directory: {greedy}" in capsys.readouterr().out
    assert eval_cli.main("countdown", "t", [*argv, "reward", "--output", str(alone)]) == 0

    def untimed(folder: Path) -> dict[str, object]:
        summary = json.loads((folder / "summary.json").read_text())
        return {k: v for k, v in summary.items() if k != records.TIMING_KEY}

    assert (greedy / "samples.jsonl").read_bytes() == (alone / "samples.jsonl").read_bytes()
    assert untimed(greedy) == untimed(alone) and untimed(greedy)["command"] == "reward"
    assert records.load_summary(tmp_path / "sampled").header.command == "analyse"
    analyse, new = [*argv, "analyse", "--n", "2"], str(tmp_path / "new")
    refused = {
        "reward decodes greedily itself": [*argv, "reward", "--greedy_output", new],
        "is --output too": [*analyse, "--output", new, "--greedy_output", new, "--force"],
        f"--output {greedy} already exists": [
            *analyse,
            "--output",
            new,
            "--greedy_output",
            str(greedy),
        ],
    }
    for message, line in refused.items():
        capsys.readouterr()
        assert eval_cli.main("countdown", "t", line) == 2
        assert message in capsys.readouterr().err, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alone", "greedy", "sampled"]


@pytest.mark.slow  # starts wandb's service process (~6 s)
def test_cli_wandb_offline(tmp_path: Path, countdown_data: Path, tiny_model_dir: Path) -> None:
    """The one run of the script itself, in a bare environment, as a user starts it."""
    args = ["--model_path", str(tiny_model_dir), "--data", str(countdown_data), "--quiet"]
    args += ["--backend", "hf"]
    args += ["--max_tokens", "4", "--limit", "2", "--output", str(tmp_path / "r"), "--wandb"]
    done = subprocess.run(
        [sys.executable, "scripts/eval_countdown.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "WANDB_MODE": "offline"},
    )
    assert done.returncode == 0, done.stderr
    assert "wandb: logged (offline)" in done.stdout
    assert list((tmp_path / "r/wandb").glob("offline-run-*/run-*.wandb"))


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model_path", "/nonexistent/actor/huggingface"], "no such folder"),
        (["--data", "/nonexistent.parquet"], "no such file"),
        (["passk", "--n", "4", "--k", "8"], "between 1 and --n 4"),
        (["analyse", "--rollout_n", "1"], "at least 2"),
        (["analyse", "--n", "1"], "at least 2"),
        (["--experiment", "no_such_experiment"], "no such experiment; choose one of"),
        (["--experiment", "gsm8k_qwen2_5_3b"], "trains gsm8k, not countdown"),
        (["--reward_kwargs", '{"formt_score": 0.1}'], "'formt_score'"),
        (["--reward_kwargs", '{"format_score": 7}'], "format_score"),
        (["--max_tokens", "4096"], "the model's context is 2048 tokens"),
        (["analyse", "--temperature", "0"], "--temperature 0 with --n 16"),
        (["passk", "--n", "4", "--temperature", "0"], "greedy samples are all the same"),
        (["--model_path", "tests/no_such_model"], "taken as a local path"),
        (["stats", "--input", "/nonexistent"], "--input /nonexistent: no such folder"),
        (["compare", "/nonexistent", "/nonexistent"], "no summary.json"),
    ],
)
def test_cli_bad_input_exits_2(
    args: list[str],
    message: str,
    tmp_path: Path,
    tiny_model_dir: Path,
    countdown_data: Path,
    capsys,
) -> None:
    base = ["--limit", "1", "--max_tokens", "2", "--quiet", "--output", str(tmp_path / "o")]
    if "--model_path" not in args:
        base += ["--model_path", str(tiny_model_dir)]
    if "--data" not in args:
        base += ["--data", str(countdown_data)]
    if args[0] in ("stats", "compare"):
        base = []
    code = eval_cli.main("countdown", "test", base + args)
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("error: ")
    assert list(tmp_path.iterdir()) == []  # nothing written, no staging left


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--limit", "-3"], "--limit"),
        (["--limit", "0"], "--limit"),
        (["--limit", "1e99"], "--limit"),
        (["--max_tokens", "0"], "--max_tokens"),
        (["--max_tokens", "99999999999"], "--max_tokens"),
        (["--batch_size", "-1"], "--batch_size"),
        (["--seed", "-1"], "--seed"),
        (["passk", "--n", "0"], "--n"),
        (["passk", "--n", "100000"], "--n"),
        (["passk", "--k", "1,x"], "--k"),
        (["passk", "--k", "0"], "--k"),
        (["analyse", "--temperature", "-1"], "--temperature"),
        (["analyse", "--temperature", "nan"], "--temperature"),
        (["analyse", "--temperature", "1e9"], "--temperature"),
        (["analyse", "--top_p", "0"], "--top_p"),
        (["analyse", "--top_p", "1.5"], "--top_p"),
        (["stats", "--input", "x", "--var_min", "-0.1"], "--var_min"),
        (["stats", "--input", "x", "--entropy_min", "inf"], "--entropy_min"),
        (["stats", "--input", "x", "--top", "0"], "--top"),
        (["--reward_kwargs", "{format_score: 1}"], "--reward_kwargs"),
        (["--reward_kwargs", "[1]"], "--reward_kwargs"),
        (["--template_kwargs", "nope"], "--template_kwargs"),
        (["--backend", "tpu"], "--backend"),
        (["--bogus_flag", "1"], "--bogus_flag"),
        (["reward", "--n", "3"], "--n"),
        (["nonsense"], "nonsense"),
        (["--quiet", "nonsense"], "nonsense"),
    ],
)
def test_cli_usage_errors_are_one_line(args: list[str], flag: str, capsys) -> None:
    """argparse's own refusals: one line naming the flag, exit 2, nothing loaded."""
    with pytest.raises(SystemExit) as done:
        eval_cli.main(
            "countdown", "test", args if "nonsense" in args else ["--model_path", "/m", *args]
        )
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and flag in err, err
    assert err.startswith("error: ") and "--help" in err


def test_cli_in_range_values_are_accepted() -> None:
    """Negative control: the edges of each range parse."""
    parsed = _parse(["analyse", "--n", "1024", "--temperature", "0", "--top_p", "1", "--seed", "0"])
    assert (parsed["n"], parsed["temperature"], parsed["top_p"]) == (1024, 0.0, 1.0)
    assert _parse(["--limit", "1", "--max_tokens", "1", "--batch_size", "4096"])["limit"] == 1


@pytest.fixture(scope="module")
def gsm8k_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlvr.tasks.gsm8k import offline_data

    out = tmp_path_factory.mktemp("data") / "gsm8k"
    offline_data(out, 6, 2)
    return out / "test.parquet"


def test_cli_refuses_another_tasks_data(
    tmp_path: Path, tiny_model_dir: Path, gsm8k_data: Path, countdown_data: Path, capsys
) -> None:
    """eval_countdown on GSM8K rows would grade every response 0, silently: refused."""
    argv = ["--model_path", str(tiny_model_dir), "--output", str(tmp_path / "o"), "--quiet"]
    assert eval_cli.main("countdown", "t", [*argv, "--data", str(gsm8k_data)]) == 2
    err = capsys.readouterr().err
    assert "data_source ['openai/gsm8k']" in err and "countdown" in err and "data prep" not in err
    assert "data_prep_countdown.py" in err and not (tmp_path / "o").exists()
    assert eval_cli.main("gsm8k", "t", [*argv, "--data", str(countdown_data)]) == 2
    assert "gsm8k reward grades" in capsys.readouterr().err
    # negative control: the task's own data passes the check
    rows = load_rows(gsm8k_data, task=tasks.get("gsm8k"))
    assert rows and rows[0]["data_source"] == "openai/gsm8k"


@pytest.mark.parametrize(
    "content,message",
    [
        (b"question,answer\n1,2\n", "not a Parquet file"),
        (b"PAR1 but truncated", "not a readable Parquet file"),
        (None, "is a folder"),
    ],
)
def test_cli_refuses_data_that_is_not_parquet(
    content: bytes | None, message: str, tmp_path: Path, tiny_model_dir: Path, capsys
) -> None:
    data = tmp_path / "data.parquet"
    if content is None:
        data.mkdir()
    else:
        data.write_bytes(content)
    argv = [
        "--model_path",
        str(tiny_model_dir),
        "--data",
        str(data),
        "--output",
        str(tmp_path / "o"),
    ]
    assert eval_cli.main("countdown", "t", argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and f"--data {data}" in err
    assert not (tmp_path / "o").exists()


def test_reward_kwargs_typo_is_refused_and_never_recorded(
    tmp_path: Path, countdown_data: Path, tiny_tokenizer, capsys
) -> None:
    """A misspelled kwarg would be swallowed by the reward's **kwargs and written into the
    summary as if it had been used; the library refuses it before decoding, the CLI before
    the model loads (test_cli_bad_input_exits_2)."""
    run = _scripted_run(tmp_path / "run", countdown_data, tiny_tokenizer)
    typo = replace(run, reward_kwargs={"formt_score": 0.1})
    with pytest.raises(EvalError, match=r"formt_score.*format_score"):
        pipeline.evaluate("reward", typo, load_rows(countdown_data), SAMPLED)
    assert typo.backend.calls == 0 and not (tmp_path / "run").exists()
    # negative control: the right name runs and is recorded
    run.backend.by_prompt = {k: v[:1] for k, v in run.backend.by_prompt.items()}
    summary = pipeline.evaluate("reward", run, load_rows(countdown_data), SAMPLED)
    assert summary.header.reward_kwargs == {"format_score": 0.1}


def test_model_folders_that_cannot_load_are_refused(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from rlvr.evaluation.model import check_context, resolve_model

    assert resolve_model(str(tiny_model_dir)).kind == "folder"  # negative control
    no_weights = tmp_path / "no_weights"
    shutil.copytree(tiny_model_dir, no_weights)
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(EvalError, match="no weight files"):
        resolve_model(str(no_weights))
    no_tokenizer = tmp_path / "no_tokenizer"
    shutil.copytree(tiny_model_dir, no_tokenizer)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (no_tokenizer / name).unlink()
    with pytest.raises(EvalError, match="no tokenizer"):
        resolve_model(str(no_tokenizer))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    with pytest.raises(EvalError, match="taken as a local path"):
        resolve_model("models/tinny")  # a typo, not a hub id: models/ is here
    assert resolve_model("Qwen/Qwen2.5-3B").kind == "hub"  # no local Qwen/ folder: a hub id
    source = resolve_model(str(tiny_model_dir))
    check_context(source, 2047)
    with pytest.raises(EvalError, match="context is 2048"):
        check_context(source, 2048)


def test_experiment_without_template_kwargs() -> None:
    """gsm8k_qwen2_5_3b sets no apply_chat_template_kwargs: {} rather than a crash."""
    found = settings.experiment_settings("gsm8k_qwen2_5_3b", tasks.get("gsm8k"))
    assert found.template_kwargs == {}
    assert found.reward_kwargs == {"method": "strict", "format_score": 0.0}


def test_compare_refuses_incomplete_or_mixed_runs(
    tmp_path: Path, countdown_data: Path, tiny_tokenizer, capsys
) -> None:
    rows = load_rows(countdown_data)
    run = _scripted_run(tmp_path / "run", countdown_data, tiny_tokenizer)
    pipeline.evaluate("analyse", run, rows, SAMPLED)
    complete = str(tmp_path / "run")
    header = records.load_summary(complete).header  # what compare checks the prompts by
    rendered = [render_prompt(tiny_tokenizer, row["prompt"]) for row in rows]
    assert header.model_dump() | fingerprints(rows, rendered) == header.model_dump()
    assert eval_cli.main("countdown", "t", ["compare", complete, complete]) == 0  # control
    capsys.readouterr()
    partial = tmp_path / ".run.partial-1"  # what an interrupted run leaves
    partial.mkdir()
    (partial / "samples.jsonl").write_text((tmp_path / "run/samples.jsonl").read_text())
    assert eval_cli.main("countdown", "t", ["compare", complete, str(partial)]) == 2
    assert "TRAINED" in capsys.readouterr().err
    half = tmp_path / "half"
    half.mkdir()
    (half / "summary.json").write_text((tmp_path / "run/summary.json").read_text())
    assert eval_cli.main("countdown", "t", ["compare", str(half), complete]) == 2
    assert "not a complete eval run folder (no samples.jsonl)" in capsys.readouterr().err
    other = json.loads((tmp_path / "run/summary.json").read_text()) | {"task": "gsm8k"}
    (tmp_path / "gsm8k.json").write_text(json.dumps(other))
    assert eval_cli.main("countdown", "t", ["compare", complete, str(tmp_path / "gsm8k.json")]) == 2
    assert "do not compare" in capsys.readouterr().err


def test_cli_bad_data_columns(tmp_path: Path, tiny_model_dir: Path, capsys) -> None:
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"question": ["q"]}).to_parquet(bad)
    argv = [
        "--model_path",
        str(tiny_model_dir),
        "--data",
        str(bad),
        "--output",
        str(tmp_path / "o"),
    ]
    assert eval_cli.main("countdown", "test", argv) == 2
    assert "missing column(s)" in capsys.readouterr().err


def test_experiment_settings_match_training_config() -> None:
    found = settings.experiment_settings("countdown_qwen3_4b")
    assert found.reward_kwargs == {"format_score": 0.1, "shaping": False}
    assert found.template_kwargs == {"enable_thinking": False}


def test_settings_cli_refuses_a_bad_override_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert settings.main(["countdown_cpu", "data.max_respons_length=8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "max_respons_length" in err and "Traceback" not in err
    assert settings.main(["countdown_cpu", "--print", "max_response_length"]) == 0
    assert capsys.readouterr().out.strip() == "48"


def test_eval_samples_as_the_experiment_trains(monkeypatch: pytest.MonkeyPatch) -> None:
    """countdown_smollm2_cpu trains on short responses: eval's default max_tokens is that
    experiment's, not the overlay's 2048; an explicit flag still wins."""
    from rlvr.config.compose import compose

    trained = compose("countdown_smollm2_cpu")
    overlay = settings.overlay_settings(tasks.get("countdown"))
    assert trained.data.max_response_length != overlay.max_response_length  # else no test
    task = tasks.get("countdown")

    def sampling(*argv: str) -> SamplingSettings:
        args = _namespace(list(argv))
        found = settings.eval_settings(task, args.experiment, args.reward_kwargs)
        return settings.sampling_settings(args, found)

    experiment = ("--experiment", "countdown_smollm2_cpu")
    assert sampling("analyse", *experiment).max_tokens == trained.data.max_response_length
    assert sampling("analyse").max_tokens == overlay.max_response_length
    assert sampling("analyse", *experiment, "--max_tokens", "7").max_tokens == 7
    rollout = trained.actor_rollout_ref.rollout
    found = sampling("passk", *experiment)
    assert (found.temperature, found.top_p) == (rollout.temperature, rollout.top_p)
    assert sampling("passk", *experiment, "--temperature", "0.5").temperature == 0.5
    assert sampling("reward", *experiment).temperature == SamplingSettings().temperature


def test_experiment_max_tokens_reaches_the_backend(
    tmp_path: Path, countdown_data: Path, tiny_model_dir: Path, tiny_tokenizer, monkeypatch
) -> None:
    """``--experiment countdown_smollm2_cpu``: the generation call gets its response length."""
    from rlvr.config.compose import compose
    from rlvr.evaluation import generation

    seen: list[SamplingSettings] = []

    class Recording:
        name, tokenizer, generation_eos = "recording", tiny_tokenizer, None

        def generate(self, prompts, sampling: SamplingSettings):
            seen.append(sampling)
            return [[Generation("no idea", 1, "stop", [-0.5])] * sampling.n for _ in prompts]

    monkeypatch.setattr(generation, "make_backend", lambda *a, **k: Recording())
    argv = ["analyse", "--model_path", str(tiny_model_dir), "--data", str(countdown_data)]
    argv += ["--limit", "2", "--n", "2", "--quiet", "--output", str(tmp_path / "run")]
    assert eval_cli.main("countdown", "t", [*argv, "--experiment", "countdown_smollm2_cpu"]) == 0
    assert seen and seen[0].max_tokens == compose("countdown_smollm2_cpu").data.max_response_length
    assert seen[0].max_tokens < 2048  # the overlay's, which eval used before


def test_default_output_dir_names_the_checkpoint() -> None:
    path = outputs.default_output_dir(
        "countdown", "reward", "artifacts/checkpoints/countdown/global_step_100/actor/huggingface"
    )
    assert path.name == "countdown_reward_countdown-global_step_100"
    assert outputs.default_output_dir("gsm8k", "analyse", "Qwen/Qwen2.5-3B").name == (
        "gsm8k_analyse_Qwen-Qwen2.5-3B"
    )


def _run_folder_state(output: Path) -> str:
    """``complete:<seed>`` for a whole run folder, else what is wrong with it."""
    try:
        summary = records.load_summary(output)
    except EvalError as exc:
        return f"no summary: {exc}"
    expected = summary.header.prompts * int(summary.header.sampling["n"] or 0)
    samples = (output / "samples.jsonl").read_text().splitlines()
    prompts = (output / "prompts.jsonl").read_text().splitlines()
    if len(samples) != expected or len(prompts) != summary.header.prompts:
        return f"partial: {len(samples)} samples, {len(prompts)} prompts"
    return f"complete:{summary.header.sampling['seed']}"


@pytest.mark.slow  # five eval processes (~50 s on two cores)
def test_an_interrupted_run_leaves_the_old_run_or_the_new_one(
    tmp_path: Path, countdown_data: Path, tiny_model_dir: Path
) -> None:
    """Ctrl-C or a kill at any moment: --output holds the old complete run or the new complete
    one, never a mix or a part (the run is staged, and the swap holds signals back)."""
    import signal
    import time

    output = tmp_path / "run"
    argv = [sys.executable, "scripts/eval_countdown.py", "--model_path", str(tiny_model_dir)]
    argv += ["--data", str(countdown_data), "--backend", "hf", "--quiet", "--output", str(output)]
    argv += ["--max_tokens", "48", "analyse", "--n", "4"]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    first = subprocess.run(
        [*argv, "--seed", "1"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    old = _snapshot(output)
    outcomes = set()
    # 0: while Python starts; then at points during the run (after its staging folder appears)
    for signum, delay in (("SIGTERM", 0.0), ("SIGINT", 0.2), ("SIGTERM", 0.5), ("SIGINT", 1.5)):
        proc = subprocess.Popen(
            [*argv, "--seed", "2", "--force"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while delay and proc.poll() is None and time.monotonic() < deadline:
            if list(tmp_path.glob(".run.partial-*")):
                break
            time.sleep(0.02)
        time.sleep(delay)
        proc.send_signal(getattr(signal, signum))
        _, err = proc.communicate(timeout=120)
        state = _run_folder_state(output)
        assert state in ("complete:1", "complete:2"), (signum, delay, state, err)
        if state == "complete:1":
            assert _snapshot(output) == old, delay
            assert proc.returncode != 0 and "Traceback" not in err, err
        outcomes.add(state)
        assert not list(tmp_path.glob(".run.replaced-*"))  # no old run left aside
        for staging in tmp_path.glob(".run.partial-*"):  # kept for a look, never the output
            assert not (staging / "summary.json").exists()
    assert "complete:1" in outcomes  # at least one interrupt landed before the swap


def _suspended_vmap_nesting() -> Iterator[None]:
    """Like torch's ``vmap_increment_nesting`` cut short by an interrupt: suspended, and it
    fails again when it is finalized."""
    try:
        yield
    finally:
        raise RuntimeError("!dynamicLayerStack.empty() INTERNAL ASSERT FAILED")


@pytest.mark.parametrize("interrupt", [True, False])
def test_an_interrupt_that_a_library_turns_into_its_error_still_exits_as_an_interrupt(
    interrupt: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What CI saw once: SIGINT landed in torch.vmap's exit inside transformers' mask code, and
    came out as torch's RuntimeError raised while handling the KeyboardInterrupt, plus a
    suspended generator's "Exception ignored" traceback at exit."""
    import gc

    # Python's own hook, which prints (pytest's would turn it into a warning); main may replace it
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)

    def run_model_command(task_name: str, args: argparse.Namespace) -> int:
        if interrupt:  # (left out of the control, whose error pytest keeps past the test)
            nesting = _suspended_vmap_nesting()
            next(nesting)
        try:
            raise KeyboardInterrupt if interrupt else ValueError("a bug of our own")
        except BaseException:
            raise RuntimeError("layerId == dynamic_layer.layerId()")  # noqa: B904 - as torch does

    monkeypatch.setattr(eval_cli, "run_model_command", run_model_command)
    if not interrupt:  # negative control: an error with no interrupt behind it is a bug, raised
        with pytest.raises(RuntimeError):
            eval_cli.main("countdown", "t", ["reward"])
        return
    assert eval_cli.main("countdown", "t", ["reward"]) == 130
    gc.collect()
    err = capsys.readouterr().err
    assert err == "interrupted: an unfinished run never replaces its --output\n"


# ---------------------------------------------------------------- refused before the model loads
# issue 16: inputs an adversarial review found failing with a traceback, or only after the
# model had loaded (or run). Each is refused up front in one line naming the flag or file.


class _Loaded(Exception):
    """Raised by the stand-in loader: the run got as far as loading the model."""


@pytest.fixture
def bad_inputs(
    tmp_path: Path,
    tiny_model_dir: Path,
    countdown_data: Path,
    tiny_tokenizer,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[dict[str, str]]:
    """Scratch inputs (the reviewer's, rebuilt), and a loader that records being called."""
    import shutil

    from rlvr.evaluation import generation

    def loader(*args, **kwargs):
        raise _Loaded

    monkeypatch.setattr(generation, "make_backend", loader)
    monkeypatch.setattr(generation.HFBackend, "__init__", loader)

    ws = tmp_path / "ws"
    ws.mkdir()

    def adapter(name: str, base: object) -> None:
        (ws / name).mkdir()
        (ws / name / "adapter_config.json").write_text(
            json.dumps({"base_model_name_or_path": base})
        )

    adapter("lora_self", str(ws / "lora_self"))
    adapter("lora_a", str(ws / "lora_b"))
    adapter("lora_b", str(ws / "lora_a"))
    adapter("lora_int", 5)
    adapter("lora_ok", str(tiny_model_dir))

    def model(name: str, **files: str) -> None:
        shutil.copytree(tiny_model_dir, ws / name)
        for file, text in files.items():
            (ws / name / file.replace("__", ".")).write_text(text)

    model("cfg_badjson", config__json="{not json")
    model("cfg_list", config__json="[1, 2]")
    model("cfg_no_type", config__json='{"hidden_size": 8}')
    shard = "model-00001-of-00002.safetensors"
    for name, index in (
        ("cfg_index", {"weight_map": {"a": shard}}),  # transformers: KeyError 'metadata'
        ("cfg_shards", {"metadata": {}, "weight_map": {"a": shard}}),
    ):
        model(name, model__safetensors__index__json=json.dumps(index))
        (ws / name / "model.safetensors").unlink()

    frame = pd.read_parquet(countdown_data)
    for name, prompt in (
        ("prompt_str", "Using the numbers [1, 2], make 3"),
        ("prompt_nocontent", [{"role": "user"}]),
    ):
        frame.assign(prompt=[prompt] * len(frame)).to_parquet(ws / f"{name}.parquet")
    os.mkfifo(ws / "fifo.parquet")

    (ws / "notes.txt").write_text("notes")
    (ws / "ro").mkdir()
    (ws / "ro").chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: deny as the kernel would deny a user
        real_access = os.access
        denied = str(ws / "ro")
        monkeypatch.setattr(
            os, "access", lambda p, mode, **kw: str(p) != denied and real_access(p, mode, **kw)
        )
    (ws / "dangling").symlink_to(ws / "nowhere")
    for name in ("runA", "runB"):
        run = _scripted_run(ws / name, countdown_data, tiny_tokenizer)
        pipeline.evaluate("analyse", run, load_rows(countdown_data), SAMPLED)
    (ws / "link_to_run").symlink_to(ws / "runB")
    yield {"ws": str(ws), "model": str(tiny_model_dir), "data": str(countdown_data)}
    (ws / "ro").chmod(0o755)


def _main(argv: list[str], capsys) -> tuple[object, str]:
    try:
        code: object = eval_cli.main("countdown", "t", argv)
    except SystemExit as done:  # argparse's refusals
        code = done.code
    return code, capsys.readouterr().err


REFUSED_BEFORE_LOADING = [
    # (review row, arguments, what the one line must name)
    ("8 adapter is its own base", ["--model_path", "{ws}/lora_self"], "lora_self/adapter_config"),
    ("8 two adapters, each the other's base", ["--model_path", "{ws}/lora_a"], "lora_a/adapter"),
    ("8 --base_model an adapter", ["--model_path", "{ws}/lora_ok", "--base_model", "{ws}/lora_a"],
     "--base_model {ws}/lora_a"),
    ("9 base_model_name_or_path: 5", ["--model_path", "{ws}/lora_int"],
     "lora_int/adapter_config.json: base_model_name_or_path is 5"),
    ("10 prompt a string", ["--data", "{ws}/prompt_str.parquet"],
     "--data {ws}/prompt_str.parquet: row 0: prompt is a str"),
    ("10 message without content", ["--data", "{ws}/prompt_nocontent.parquet"],
     "--data {ws}/prompt_nocontent.parquet: row 0: prompt message 0 has no content"),
    ("11 --output below a file", ["--output", "{ws}/notes.txt/run"],
     "--output {ws}/notes.txt/run: {ws}/notes.txt is a file"),
    ("11 --output in a read-only folder", ["--output", "{ws}/ro/run"],
     "--output {ws}/ro/run: cannot write in {ws}/ro"),
    ("12 --output a dangling link", ["--output", "{ws}/dangling", "--force"],
     "--output {ws}/dangling is a symbolic link"),
    ("12 --output a link to a run", ["--output", "{ws}/link_to_run", "--force"],
     "--output {ws}/link_to_run is a symbolic link"),
    ("15 compare --output in BASE", ["compare", "{ws}/runA", "{ws}/runB", "--output",
     "{ws}/runA/summary.json", "--force"], "--output {ws}/runA/summary.json: inside BASE"),
    ("15 compare --output beside TRAINED's summary.json", ["compare", "{ws}/runA",
     "{ws}/runB/summary.json", "--output", "{ws}/runB/summary.md", "--force"],
     "--output {ws}/runB/summary.md: inside TRAINED"),
    ("16 tokenize", ["--template_kwargs", '{{"tokenize": true}}'], "--template_kwargs: tokenize"),
    ("16 add_generation_prompt", ["--template_kwargs", '{{"add_generation_prompt": false}}'],
     "--template_kwargs: add_generation_prompt"),
    ("16 conversation", ["--template_kwargs", '{{"conversation": []}}'],
     "--template_kwargs: conversation"),
    ("17 temperature 1e-300", ["passk", "--n", "2", "--temperature", "1e-300"],
     "argument --temperature: 1e-300"),
    ("17 analyse temperature 1e-5", ["analyse", "--n", "2", "--temperature", "1e-5"],
     "argument --temperature: 1e-5"),
    ("18 --base_model missing", ["--model_path", "{ws}/lora_ok", "--base_model", "{ws}/nope"],
     "--base_model {ws}/nope: no such folder"),
    ("25 --data a FIFO", ["--data", "{ws}/fifo.parquet"],
     "--data {ws}/fifo.parquet: not a regular file"),
    ("26 config.json not JSON", ["--model_path", "{ws}/cfg_badjson"],
     "cfg_badjson/config.json: not valid JSON"),
    ("26 config.json a list", ["--model_path", "{ws}/cfg_list"],
     "cfg_list/config.json: a JSON list"),
    ("26 config.json without model_type", ["--model_path", "{ws}/cfg_no_type"],
     "cfg_no_type/config.json: no model_type"),
    ("26 only an index, no metadata", ["--model_path", "{ws}/cfg_index"],
     "cfg_index/model.safetensors.index.json: no metadata"),
    ("26 an index naming missing shards", ["--model_path", "{ws}/cfg_shards"],
     "cfg_shards/model.safetensors.index.json: lists shard file(s) not in the folder"),
]  # fmt: skip


def _argv(args: list[str], inputs: dict[str, str]) -> list[str]:
    args = [a.format(**inputs) for a in args]
    if args[:1] == ["compare"]:
        return args
    base = ["--model_path", inputs["model"], "--data", inputs["data"], "--quiet"]
    base += ["--limit", "1", "--max_tokens", "2", "--output", f"{inputs['ws']}/out"]
    return base + args  # the last value of an option wins


@pytest.mark.parametrize(
    "args,names",
    [row[1:] for row in REFUSED_BEFORE_LOADING],
    ids=[row[0] for row in REFUSED_BEFORE_LOADING],
)
def test_review_inputs_are_refused_before_the_model_loads(
    args: list[str], names: str, bad_inputs: dict[str, str], capsys
) -> None:
    before = (Path(bad_inputs["ws"]) / "runA/summary.json").read_bytes()
    code, err = _main(_argv(args, bad_inputs), capsys)  # the loader raises _Loaded if called
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert names.format(**bad_inputs) in err, err
    assert not (Path(bad_inputs["ws"]) / "out").exists()
    assert (Path(bad_inputs["ws"]) / "runA/summary.json").read_bytes() == before


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--model_path", "{ws}/lora_ok"],
        ["--model_path", "{ws}/lora_ok", "--base_model", "{model}"],
        ["--template_kwargs", '{{"enable_thinking": false}}'],
        ["passk", "--n", "2", "--temperature", "0.001"],
        ["passk", "--n", "1", "--temperature", "0"],
        ["--output", "{ws}/new/nested/run"],
        ["--output", "{ws}/runB", "--force"],
    ],
)
def test_good_inputs_reach_the_model(args: list[str], bad_inputs: dict[str, str], capsys) -> None:
    """Negative control: every check passes, and the run goes on to load the model."""
    with pytest.raises(_Loaded):
        eval_cli.main("countdown", "t", _argv(args, bad_inputs))
    assert capsys.readouterr().err in ("", "\n")


def test_compare_output_beside_the_runs_is_written(bad_inputs: dict[str, str], capsys) -> None:
    ws = bad_inputs["ws"]
    table = Path(ws) / "table.md"
    code, err = _main(
        ["compare", f"{ws}/runA", f"{ws}/runB/summary.json", "--output", str(table)], capsys
    )
    assert code == 0 and table.read_text().startswith("|"), err


def test_evaluate_refuses_an_unknown_command_and_defaults_passks_k(
    tmp_path: Path, countdown_data: Path, tiny_tokenizer
) -> None:
    """The library entry point: an unknown command is refused before decoding (it would run as
    reward under its own name); passk without k values takes the CLI's default ks for n."""
    run = _scripted_run(tmp_path / "run", countdown_data, tiny_tokenizer)
    with pytest.raises(EvalError, match="'passkk' is not reward, passk or analyse"):
        pipeline.evaluate("passkk", run, load_rows(countdown_data), SAMPLED)
    assert run.backend.calls == 0 and not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="sample_and_grade"):
        run.header("passk", SAMPLED, load_rows(countdown_data))  # nothing rendered yet
    summary = pipeline.evaluate("passk", run, load_rows(countdown_data), SAMPLED)
    assert [k for k in summary.metrics if k.startswith("pass@")] == ["pass@1", "pass@4"]

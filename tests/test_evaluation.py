"""The eval engine and CLI: verl-identical prompts, every command, outputs, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rlvr import tasks
from rlvr.evaluation import cli as eval_cli
from rlvr.evaluation import metrics
from rlvr.evaluation import runs as evaluation
from rlvr.evaluation.generation import Generation, SamplingSettings

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def countdown_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlvr.tasks.countdown import prepare

    out = tmp_path_factory.mktemp("data") / "countdown"
    return prepare("generate", str(out), train_size=8, test_size=6, seed=1).paths["test"]


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
    rows = evaluation.load_rows(countdown_data)
    assert len(dataset) == len(rows)
    for index, row in enumerate(rows):
        ours = evaluation.render_prompt(tiny_tokenizer, row["prompt"], **template_kwargs)
        assert ours == list(dataset[index]["raw_prompt_ids"])


class ScriptedBackend:
    """Plays fixed responses (by prompt) through the real grading path; generation is the only
    part replaced, so every metric can be checked against hand-computed values."""

    name = "scripted"

    def __init__(self, tokenizer, responses: dict[int, list[str]], rows) -> None:
        self.tokenizer = tokenizer
        self.by_prompt = {
            tuple(evaluation.render_prompt(tokenizer, row["prompt"])): responses[row["_index"]]
            for row in rows
        }

    def generate(self, prompts, sampling: SamplingSettings):
        out = []
        for ids in prompts:
            texts = self.by_prompt[tuple(ids)]
            assert len(texts) == sampling.n
            out.append([Generation(t, 10, "stop", [-0.5] * 10) for t in texts])
        return out


def _responses(rows) -> dict[int, list[str]]:
    """Prompt 0: 4/4 correct; 1: 2/4; 2: 1/4 plus 2 well-formed wrong; 3..: nothing right."""
    right = [f"<answer>{row['extra_info']['solution']}</answer>" for row in rows]
    wrong, garbage = "<answer>1 + 1</answer>", "no idea"
    scripted = {
        0: [right[0]] * 4,
        1: [right[1], garbage, right[1], garbage],
        2: [right[2], wrong, wrong, garbage],
    }
    return {i: scripted.get(i, [garbage] * 4) for i in range(len(rows))}


def _scripted_run(tmp_path: Path, data: Path, tokenizer) -> evaluation.EvalRun:
    rows = evaluation.load_rows(data)
    return evaluation.EvalRun(
        task=tasks.get("countdown"),
        model_path="scripted",
        data_path=str(data),
        output_dir=tmp_path / "run",
        backend=ScriptedBackend(tokenizer, _responses(rows), rows),
        reward_kwargs={"format_score": 0.1},
        prompts_per_chunk=4,
        progress=False,
    )


def test_analyse_by_hand(tmp_path: Path, countdown_data: Path, tiny_tokenizer) -> None:
    run = _scripted_run(tmp_path, countdown_data, tiny_tokenizer)
    rows = evaluation.load_rows(countdown_data)
    summary = evaluation.run_analyse(run, rows, SamplingSettings(n=4, temperature=1.0))
    # success rates 1, .5, .25, 0, 0, 0 over 6 prompts
    assert summary["accuracy"] == pytest.approx(1.75 / 6)
    prompt2 = [1.0, 0.1, 0.1, 0.0]  # one right, two well-formed wrong (format score), one empty
    expected_variance = (0.0 + 0.25 + metrics.variance(prompt2)) / 6
    assert summary["mean_variance"] == pytest.approx(expected_variance)
    assert summary["nonzero_variance_fraction"] == pytest.approx(2 / 6)
    assert summary["learnable_fraction"] == pytest.approx(2 / 6)  # prompts 1 and 2
    assert summary["mean_outcome_entropy"] == pytest.approx((1.0 + 0.8112781244591328) / 6)
    assert summary["mean_token_entropy"] == pytest.approx(0.5)
    assert summary["verdict"] == "ready_for_grpo"
    records = [json.loads(x) for x in (run.output_dir / "prompts.jsonl").read_text().splitlines()]
    assert [r["success_rate"] for r in records] == [1.0, 0.5, 0.25, 0.0, 0.0, 0.0]
    samples = (run.output_dir / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 24 and "logprobs" not in json.loads(samples[0])
    assert "**Verdict: ready_for_grpo.**" in (run.output_dir / "summary.md").read_text()


def test_passk_and_reward_by_hand(tmp_path: Path, countdown_data: Path, tiny_tokenizer) -> None:
    run = _scripted_run(tmp_path, countdown_data, tiny_tokenizer)
    rows = evaluation.load_rows(countdown_data)
    summary = evaluation.run_passk(run, rows, SamplingSettings(n=4, temperature=1.0), [1, 2, 4])
    counts = [4, 2, 1, 0, 0, 0]
    for k in (1, 2, 4):
        expected = sum(metrics.pass_at_k(4, c, k) for c in counts) / 6
        assert summary[f"pass@{k}"] == pytest.approx(expected)
    assert summary["pass@4"] == pytest.approx(3 / 6)
    assert summary["format_rate"] == pytest.approx(9 / 24)
    with pytest.raises(evaluation.EvalError, match="between 1 and"):
        evaluation.run_passk(run, rows, SamplingSettings(n=4), [8])

    run.backend.by_prompt = {k: v[:1] for k, v in run.backend.by_prompt.items()}
    greedy = evaluation.run_reward(run, rows, SamplingSettings(n=4, temperature=1.0))
    assert greedy["sampling"]["n"] == 1 and greedy["sampling"]["temperature"] == 0.0
    assert greedy["pass@1"] == pytest.approx(3 / 6)  # first responses: right, right, right
    assert greedy["mean_score"] == pytest.approx(3 / 6)


def test_stats_filter_and_compare(tmp_path: Path, countdown_data: Path, tiny_tokenizer) -> None:
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    run = _scripted_run(tmp_path, countdown_data, tiny_tokenizer)
    rows = evaluation.load_rows(countdown_data)
    evaluation.run_analyse(run, rows, SamplingSettings(n=4, temperature=1.0))
    records, _ = evaluation.load_prompt_records(run.output_dir)
    chosen = evaluation.high_value_prompts(records, 0.05, 0.2)
    assert [r["prompt_index"] for r in chosen] == [1, 2]  # highest variance first

    target = tmp_path / "learnable.parquet"
    assert evaluation.filter_learnable(run.output_dir, target, 0.05, 0.2) == (2, 6)
    written = pd.read_parquet(target)
    source = pd.read_parquet(countdown_data)
    assert written["extra_info"].map(lambda e: e["solution"]).tolist() == [
        source.iloc[i]["extra_info"]["solution"] for i in (1, 2)
    ]
    config = OmegaConf.create({"max_prompt_length": 512, "filter_overlong_prompts": False})
    assert len(RLHFDataset(str(target), tiny_tokenizer, config)) == 2  # ready for training

    # A regenerated data file must not silently select different rows.
    pd.concat([source.iloc[[3]], source]).reset_index(drop=True).to_parquet(countdown_data)
    try:
        with pytest.raises(evaluation.EvalError, match="data file changed"):
            evaluation.filter_learnable(run.output_dir, tmp_path / "other.parquet", 0.05, 0.2)
        assert not (tmp_path / "other.parquet").exists()
    finally:
        source.to_parquet(countdown_data)

    base = {**json.loads((run.output_dir / "summary.json").read_text()), "model": "base"}
    trained = {**base, "model": "trained", "mean_score": base["mean_score"] + 0.25}
    table = evaluation.compare_markdown(base, trained)
    assert "| mean score |" in table and "+25.00 pt" in table
    assert "same prompts" not in table
    assert "did not use the same prompts" in evaluation.compare_markdown(
        base, {**trained, "prompts": 3}
    )


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/eval_countdown.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_cli_every_command_on_the_tiny_model(
    tmp_path: Path, countdown_data: Path, tiny_model_dir: Path
) -> None:
    common = ["--model_path", str(tiny_model_dir), "--data", str(countdown_data), "--quiet"]
    common += ["--max_tokens", "8", "--limit", "4"]
    # no command given: reward; options may also follow the command
    reward = _cli(*common, "--output", str(tmp_path / "reward"))
    assert reward.returncode == 0, reward.stderr
    assert "# countdown reward" in reward.stdout and "| pass@1 |" in reward.stdout
    passk = _cli("passk", *common, "--n", "4", "--output", str(tmp_path / "passk"))
    assert passk.returncode == 0, passk.stderr
    summary = json.loads((tmp_path / "passk/summary.json").read_text())
    assert {"pass@1", "pass@4"} <= summary.keys() and summary["prompts"] == 4
    assert summary["reward_kwargs"] == {"format_score": 0.1, "shaping": False}  # training's
    analyse = _cli(*common, "--output", str(tmp_path / "an"), "analyse", "--rollout_n", "3")
    assert analyse.returncode == 0, analyse.stderr
    assert "Verdict: sft_first" in analyse.stdout  # a random model never solves Countdown
    assert len((tmp_path / "an/samples.jsonl").read_text().splitlines()) == 12
    stats = _cli("stats", "--input", str(tmp_path / "an"))
    assert stats.returncode == 0 and "0 of 4 prompts" in stats.stdout
    nothing = _cli("filter", "--input", str(tmp_path / "an"), "--output", str(tmp_path / "f.pq"))
    assert nothing.returncode == 2 and "nothing to write" in nothing.stderr
    compare = _cli("compare", str(tmp_path / "reward"), str(tmp_path / "passk/summary.json"))
    assert compare.returncode == 0 and "| mean score |" in compare.stdout


def test_cli_wandb_offline(tmp_path: Path, countdown_data: Path, tiny_model_dir: Path) -> None:
    args = ["--model_path", str(tiny_model_dir), "--data", str(countdown_data), "--quiet"]
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
        (["--experiment", "no_such_experiment"], "not one of"),
        (["stats", "--input", "/nonexistent"], "no summary.json"),
        (["compare", "/nonexistent", "/nonexistent"], "no summary.json"),
    ],
)
def test_cli_bad_input_exits_2(
    args: list[str], message: str, tiny_model_dir: Path, countdown_data: Path, capsys
) -> None:
    base = ["--limit", "1", "--max_tokens", "2", "--quiet", "--output", "/tmp/rlvr-unused"]
    if "--model_path" not in args and args[0] not in ("stats", "compare"):
        base += ["--model_path", str(tiny_model_dir)]
    if "--data" not in args and args[0] not in ("stats", "compare"):
        base += ["--data", str(countdown_data)]
    if args[0] in ("stats", "compare"):
        base = []
    code = eval_cli.main("countdown", "test", base + args)
    assert code == 2
    assert message in capsys.readouterr().err


def test_cli_bad_data_columns(tmp_path: Path, tiny_model_dir: Path, capsys) -> None:
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"question": ["q"]}).to_parquet(bad)
    code = eval_cli.main(
        "countdown", "test", ["--model_path", str(tiny_model_dir), "--data", str(bad)]
    )
    assert code == 2 and "missing column(s)" in capsys.readouterr().err


def test_cli_help_explains_every_flag() -> None:
    parser = eval_cli.build_parser("countdown", "d")
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, action.option_strings
    for command in ("reward", "passk", "analyse", "stats", "filter", "compare"):
        done = _cli(command, "--help")
        assert done.returncode == 0 and "usage:" in done.stdout


def test_experiment_settings_match_training_config() -> None:
    reward_kwargs, template_kwargs = evaluation.experiment_settings("countdown_qwen3_4b")
    assert reward_kwargs == {"format_score": 0.1, "shaping": False}
    assert template_kwargs == {"enable_thinking": False}


def test_default_output_dir_names_the_checkpoint() -> None:
    path = evaluation.default_output_dir(
        "countdown", "reward", "artifacts/checkpoints/countdown/global_step_100/actor/huggingface"
    )
    assert path.name == "countdown_reward_countdown-global_step_100"
    assert evaluation.default_output_dir("gsm8k", "analyse", "Qwen/Qwen2.5-3B").name == (
        "gsm8k_analyse_Qwen-Qwen2.5-3B"
    )

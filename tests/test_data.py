"""Shared data plumbing: atomic writes, the prep CLI's exit codes, and verl reading our Parquet."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rlvr.data.prep import DataPrepError, parse_int, parse_int_list, write_splits
from rlvr.tasks import prep_cli

ROOT = Path(__file__).resolve().parents[1]


def test_write_splits_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = Path.write_bytes

    def failing(self: Path, data: bytes) -> int:  # the second split's file fails
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", failing)
    with pytest.raises(OSError, match="Input/output error"):
        write_splits(tmp_path / "new", {"train": [{"a": 1}], "test": [{"a": 2}]})
    assert not (tmp_path / "new").exists()
    assert list(tmp_path.iterdir()) == []  # no staging folder left behind


def test_write_splits_keeps_old_files_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "data"
    write_splits(out, {"train": [{"a": 1}], "test": [{"a": 2}]})
    with pytest.raises(DataPrepError, match="empty"):
        write_splits(out, {"train": [{"a": 9}], "test": []})
    assert pd.read_parquet(out / "train.parquet")["a"].tolist() == [1]


def test_parse_helpers() -> None:
    assert parse_int_list("[1, 2]", "w") == [1, 2]
    assert parse_int("7", "w") == 7
    with pytest.raises(DataPrepError, match=r"w: 1\.5 is not an integer"):
        parse_int(1.5, "w")
    with pytest.raises(DataPrepError, match="not a list"):
        parse_int_list("nope", "w")


def test_countdown_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cd"
    argv = ["--source", "generate", "--train_size", "200", "--test_size", "20"]
    assert prep_cli.main("countdown", [*argv, "--local_dir", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "train: 200 rows" in stdout and "stats: numbers per task" in stdout
    assert '"data_source": "countdown"' in stdout  # the rendered example
    assert {p.name for p in out.iterdir()} == {"train.parquet", "test.parquet"}


def _hub_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``datasets.load_dataset`` as it fails offline (no network in tests)."""
    import datasets

    def offline(name: str, *args: object, **kwargs: object) -> None:
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (offline mode is enabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)


@pytest.mark.parametrize(
    ("task", "args", "message"),
    [
        ("countdown", ["--source", "missing.jsonl"], "no such file"),
        ("countdown", ["--source", "hf"], "'Jiayi-Pan/Countdown-Tasks-3to4' from the Hugging Face"),
        ("gsm8k", ["--source", "hf"], "--source PATH"),
        ("countdown", ["--source", "generate", "--max_number", "1000000000"], "--max_number"),
        ("countdown", ["--source", "generate", "--train_size", "2000000"], "at most 1,000,000"),
    ],
)
def test_cli_returns_2_on_bad_input(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    task: str,
    args: list[str],
    message: str,
) -> None:
    _hub_unreachable(monkeypatch)
    out = tmp_path / "out"
    assert prep_cli.main(task, [*args, "--local_dir", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_scripts_run_and_explain_every_flag() -> None:
    """The one run of each script file itself (its imports as a script, its docstring as help);
    everything else calls ``rlvr.tasks.prep_cli.main`` in-process."""
    for script in ("data_prep_countdown.py", "data_prep_gsm8k.py"):
        done = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / script), "--help"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
        assert "--source" in done.stdout and "--template" in done.stdout
        assert "Exit code 2 on bad input" in done.stdout  # the script's own docstring
        assert not done.stderr


@pytest.mark.parametrize("task", ["countdown", "gsm8k"])
def test_verl_rlhf_dataset_reads_our_parquet(tmp_path: Path, tiny_tokenizer, task: str) -> None:
    from omegaconf import OmegaConf
    from torch.utils.data import DataLoader
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    if task == "countdown":
        from rlvr.tasks.countdown import prepare

        paths = prepare("generate", str(tmp_path / task), train_size=16, test_size=4).paths
    else:
        from rlvr.tasks.gsm8k import prepare

        source = tmp_path / "g.jsonl"
        source.write_text(
            "".join(f'{{"question": "q{i}?", "answer": "x\\n#### {i}"}}\n' for i in range(12))
        )
        paths = prepare(str(source), str(tmp_path / task), test_size=4).paths
    config = OmegaConf.create(
        {
            "max_prompt_length": 512,
            "truncation": "error",
            "filter_overlong_prompts": True,
            # the filter in this process: datasets 4.4 forks a Pool even for verl's default of
            # one worker, and a fork of pytest's threaded process hung this test twice in CI
            "filter_overlong_prompts_workers": None,
            "cache_dir": str(tmp_path / "cache"),
            "return_raw_chat": True,
        }
    )
    dataset = RLHFDataset(data_files=str(paths["train"]), tokenizer=tiny_tokenizer, config=config)
    batch = next(iter(DataLoader(dataset, batch_size=4, collate_fn=collate_fn)))
    assert batch["input_ids"].shape[0] == 4
    assert len(batch["reward_model"]) == 4 and "ground_truth" in batch["reward_model"][0]
    assert batch["data_source"][0] in ("countdown", "openai/gsm8k")

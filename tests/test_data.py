"""Shared data plumbing: atomic writes, the scripts' exit codes, and verl reading our Parquet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rlvr.data.prep import DataPrepError, parse_int, parse_int_list, write_splits

ROOT = Path(__file__).resolve().parents[1]


def test_write_splits_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = pd.DataFrame.to_parquet

    def failing(self, path, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", failing)
    with pytest.raises(OSError, match="disk full"):
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


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(ROOT)},
    )


def test_countdown_script_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "cd"
    done = _run(
        "data_prep_countdown.py",
        "--source",
        "generate",
        "--train_size",
        "200",
        "--test_size",
        "20",
        "--local_dir",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert "train: 200 rows" in done.stdout and "stats: numbers per task" in done.stdout
    assert '"data_source": "countdown"' in done.stdout  # the rendered example
    assert {p.name for p in out.iterdir()} == {"train.parquet", "test.parquet"}


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("data_prep_countdown.py", ["--source", "missing.jsonl"], "no such file"),
        ("data_prep_countdown.py", ["--source", "hf"], "Hugging Face hub"),
        ("data_prep_gsm8k.py", ["--source", "hf"], "--source PATH"),
        ("data_prep_countdown.py", ["--source", "generate", "--test_size", "0"], "--test_size"),
    ],
)
def test_scripts_exit_2_on_bad_input(tmp_path: Path, script: str, args: list, message: str) -> None:
    out = tmp_path / "out"
    done = _run(script, *args, "--local_dir", str(out))
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert not out.exists()


def test_scripts_help_explains_every_flag() -> None:
    for script in ("data_prep_countdown.py", "data_prep_gsm8k.py"):
        done = _run(script, "--help")
        assert done.returncode == 0
        assert (
            "--source" in done.stdout and "--template" in done.stdout and "Usage" not in done.stderr
        )


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
            "cache_dir": str(tmp_path / "cache"),
            "return_raw_chat": True,
        }
    )
    dataset = RLHFDataset(data_files=str(paths["train"]), tokenizer=tiny_tokenizer, config=config)
    batch = next(iter(DataLoader(dataset, batch_size=4, collate_fn=collate_fn)))
    assert batch["input_ids"].shape[0] == 4
    assert len(batch["reward_model"]) == 4 and "ground_truth" in batch["reward_model"][0]
    assert batch["data_source"][0] in ("countdown", "openai/gsm8k")

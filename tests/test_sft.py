"""The SFT warm start: its data (columns verl's SFTDataset reads, answers the reward calls
correct, prompts token for token as GRPO renders them), its configs against verl's own checks,
and the CPU fixes' guards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rewards.countdown import compute_score
from rlvr.config.compose import ConfigError
from rlvr.data.prep import DataPrepError, sft_columns
from rlvr.tasks import countdown, prep_cli
from rlvr.train import sft_config


def _sft_data(tmp_path: Path, template: str = "plain", **kwargs: object) -> dict[str, Path]:
    return countdown.prepare(
        "generate", tmp_path / "countdown", template=template, sft=True, **kwargs
    ).paths


def test_every_sft_answer_is_graded_correct(tmp_path: Path) -> None:
    """The SFT targets, graded by the reward itself (an independent check of the solver and of
    the answer format): every one is correct, none merely formatted."""
    from rlvr.tasks.countdown_puzzles import GeneratorSpec

    generator = GeneratorSpec((2, 4), 30, (1, 100), 7)
    paths = countdown.prepare(
        "generate",
        tmp_path / "c",
        sft=True,
        template="plain",
        train_size=400,
        test_size=50,
        generator=generator,
    ).paths
    for split in ("train", "test"):
        rows = pd.read_parquet(paths[split])
        for response, truth in zip(rows.sft_response, rows.reward_model, strict=True):
            result = compute_score("countdown", response, truth["ground_truth"])
            assert result["score"] == 1.0 and result["correct"] == 1.0, (response, truth)


def test_sft_prompt_is_the_grpo_prompt_token_for_token(tmp_path: Path, tiny_tokenizer) -> None:
    """verl's SFTDataset and verl's RLHFDataset, on the same rows: the same prompt tokens."""
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.dataset.sft_dataset import SFTDataset

    train = _sft_data(tmp_path, train_size=6, test_size=2)["train"]
    sft = SFTDataset(
        str(train),
        tiny_tokenizer,
        OmegaConf.create(
            {"prompt_key": "sft_prompt", "response_key": "sft_response", "max_length": 160}
        ),
    )
    grpo = RLHFDataset(
        data_files=str(train),
        tokenizer=tiny_tokenizer,
        config=OmegaConf.create(
            {"max_prompt_length": 160, "truncation": "error", "cache_dir": str(tmp_path / "c")}
        ),
    )
    for index in range(len(sft)):
        sft_row, grpo_row = sft[index], grpo[index]
        prompt_tokens = grpo_row["input_ids"][grpo_row["attention_mask"].bool()].tolist()
        n = len(prompt_tokens)
        assert sft_row["input_ids"][:n].tolist() == prompt_tokens
        # the loss starts at the first answer token: the prompt is not trained on
        assert sft_row["loss_mask"][: n - 1].sum() == 0 and sft_row["loss_mask"][n - 1] == 1
        answer = tiny_tokenizer.decode(
            sft_row["input_ids"][n:][sft_row["attention_mask"][n:].bool()]
        )
        assert answer.startswith(pd.read_parquet(train).sft_response[index])


def _trained_tokens(row: dict) -> list[int]:
    """The tokens the loss trains, as fsdp_sft_trainer pairs labels and mask (both [:, 1:])."""
    labels, mask = row["input_ids"][1:], row["loss_mask"][1:]
    return labels[mask.bool()].tolist()


def test_aligned_dataset_trains_the_answer_and_eos(tmp_path: Path, tiny_tokenizer) -> None:
    """The SFT loss covers exactly the answer's tokens and EOS; verl 0.6.1's own dataset (the
    negative control) trains the prompt's last token instead of EOS (verl issue 3562)."""
    from omegaconf import OmegaConf
    from verl.utils.dataset.sft_dataset import SFTDataset

    from rlvr.train.sft_dataset import AlignedSFTDataset

    train = _sft_data(tmp_path, train_size=6, test_size=2)["train"]
    config = OmegaConf.create(
        {"prompt_key": "sft_prompt", "response_key": "sft_response", "max_length": 160}
    )
    eos = tiny_tokenizer.eos_token_id
    for index, response in enumerate(pd.read_parquet(train).sft_response):
        answer = tiny_tokenizer(response, add_special_tokens=False)["input_ids"]
        ours = AlignedSFTDataset(str(train), tiny_tokenizer, config)[index]
        assert _trained_tokens(ours) == [*answer, eos]
        verls = _trained_tokens(SFTDataset(str(train), tiny_tokenizer, config)[index])
        assert verls[1:] == answer and eos not in verls


def test_sft_refuses_a_prompt_verl_would_render_differently(tmp_path: Path) -> None:
    with pytest.raises(DataPrepError, match="one user message"):
        sft_columns(
            [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], "r", "x"
        )
    assert (
        prep_cli.main(
            "countdown",
            [
                "--source",
                "generate",
                "--sft",
                "--template",
                "chat",
                "--local_dir",
                str(tmp_path / "d"),
                "--train_size",
                "4",
                "--test_size",
                "2",
            ],
        )
        == 2
    )
    assert not (tmp_path / "d").exists()  # nothing written


@pytest.mark.parametrize("experiment", sft_config.sft_experiments())
def test_every_sft_experiment_passes_verls_checks(experiment: str) -> None:
    config = sft_config.compose_sft(experiment)
    sft_config.validate(config)
    assert (
        config.data.prompt_key == "sft_prompt"
        and "hf_model" in config.trainer.checkpoint.save_contents
    )


def test_verls_batch_check_can_fail() -> None:
    """The negative control: a batch that does not split over the ranks is refused, by verl."""
    config = sft_config.compose_sft("countdown_smollm2_cpu", ["data.train_batch_size=15"])
    with pytest.raises(AssertionError):
        sft_config.validate(config)
    found = sft_config.problems(config)
    assert any("data.train_batch_size 15" in line for line in found)


def test_sft_config_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="did you mean countdown_cpu"):
        sft_config.compose_sft("countdown_cpuu")
    assert sft_config.main(["countdown_smollm2_cpu", "paths.data=/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "data.train_files: /nonexistent/countdown/train.parquet does not exist" in err


def test_latest_model_reads_verls_tracker(tmp_path: Path) -> None:
    config = sft_config.compose_sft("countdown_cpu", [f"trainer.default_local_dir={tmp_path}"])
    assert sft_config.latest_model(config) is None
    (tmp_path / "global_step_3/huggingface").mkdir(parents=True)
    (tmp_path / "global_step_3/huggingface/config.json").write_text("{}")
    (tmp_path / sft_config.TRACKER_FILE).write_text("3")
    assert sft_config.latest_model(config) == tmp_path / "global_step_3/huggingface"


def test_cpu_fixes_refuse_a_changed_verl() -> None:
    """Each fix replaces one verl 0.6.1 line; the guard fails loudly when the line is gone."""
    from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer

    from rlvr.cpu import sft

    sft._require_source(
        FSDPSFTTrainer._build_model_optimizer, 'attn_implementation="flash_attention_2"'
    )
    with pytest.raises(RuntimeError, match=r"update rlvr/cpu/sft\.py"):
        sft._require_source(FSDPSFTTrainer._build_model_optimizer, 'attn_implementation="eager"')


@pytest.mark.parametrize(
    ("native", "forced", "fp32"), [(False, None, True), (True, None, False), (True, "1", True)]
)
def test_fp32_only_where_the_cpu_lacks_native_bf16(
    monkeypatch: pytest.MonkeyPatch, native: bool, forced: str | None, fp32: bool
) -> None:
    """verl's bf16 stays on a CPU with AVX512-BF16 or AMX (1.8x faster than fp32 there);
    elsewhere, or with RLVR_SFT_FP32=1, the parameters are fp32."""
    from rlvr.cpu import sft

    monkeypatch.setattr(sft, "native_bf16", lambda: native)
    if forced is None:
        monkeypatch.delenv("RLVR_SFT_FP32", raising=False)
    else:
        monkeypatch.setenv("RLVR_SFT_FP32", forced)
    assert (sft._fp32_fsdp2 in sft.cpu_fixes()) is fp32
    assert sft._sdpa_attention in sft.cpu_fixes()


@pytest.mark.parametrize(("asked", "packed"), [(None, True), ("0", False), ("1", True)])
def test_the_packed_sft_loss_is_installed_when_asked(
    monkeypatch: pytest.MonkeyPatch, asked: str | None, packed: bool
) -> None:
    """On CPU run_sft's trainer is PackedSFTTrainer (rlvr/cpu/sft_packing.py) unless
    RLVR_SFT_PACKED=0, which keeps verl's padded forward."""
    from verl.trainer import fsdp_sft_trainer

    from rlvr.cpu import sft
    from rlvr.cpu.sft_packing import PackedSFTTrainer

    if asked is None:
        monkeypatch.delenv("RLVR_SFT_PACKED", raising=False)
    else:
        monkeypatch.setenv("RLVR_SFT_PACKED", asked)
    assert (sft._packed_sft_loss in sft.cpu_fixes()) is packed
    verls = fsdp_sft_trainer.FSDPSFTTrainer
    monkeypatch.setattr(fsdp_sft_trainer, "FSDPSFTTrainer", verls)  # restored afterwards
    sft._packed_sft_loss()
    assert fsdp_sft_trainer.FSDPSFTTrainer is PackedSFTTrainer
    assert PackedSFTTrainer.__mro__[1] is verls


def test_cpu_batches_are_verls_batches_made_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CPU the trainer's loaders make their batches in its own process, unpinned; for the
    trainer's shuffled sampler they are verl's loader's batches (worker processes), in order."""
    import torch
    from torch.utils.data import DistributedSampler
    from verl.trainer import fsdp_sft_trainer

    from rlvr.cpu import sft

    verls = fsdp_sft_trainer.StatefulDataLoader
    monkeypatch.setattr(fsdp_sft_trainer, "StatefulDataLoader", verls)  # restored afterwards
    sft._cpu_batches()
    ours = fsdp_sft_trainer.StatefulDataLoader
    rows = [{"input_ids": torch.arange(i, i + 4)} for i in range(24)]

    def batches(loader_class: type, **kwargs: Any) -> tuple[Any, list[Any]]:
        sampler = DistributedSampler(rows, shuffle=True, num_replicas=1, rank=0, drop_last=True)
        loader = loader_class(
            dataset=rows, batch_size=4, sampler=sampler, num_workers=2, drop_last=True, **kwargs
        )
        return loader, [batch["input_ids"] for batch in loader]

    loader, made_here = batches(ours, pin_memory=True, pin_memory_device="cuda")
    assert loader.num_workers == 0 and not loader.pin_memory
    _, made_by_workers = batches(verls)  # unpinned: there is no CUDA to pin for
    assert len(made_here) == 6 and made_here[0].tolist() != list(range(4))  # shuffled
    for here, there in zip(made_here, made_by_workers, strict=True):
        assert torch.equal(here, there)


@pytest.mark.slow
@pytest.mark.no_cuda  # the CPU path (rlvr/cpu/sft.py)
def test_launch_sft_writes_a_trained_loadable_model(tmp_path: Path) -> None:
    """verl's SFT trainer through the launcher, 2 steps on the tiny model: the last line names a
    huggingface folder that transformers loads, with weights that moved from the base model."""
    import os

    import torch
    from conftest import run_bounded
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.tiny import build_model

    _sft_data(tmp_path / "data", train_size=16, test_size=4)
    base = build_model(tmp_path / "tiny")
    env = {**os.environ, "WANDB_MODE": "offline"}
    output = run_bounded(
        [
            "bash",
            "scripts/launch_sft.sh",
            "countdown_cpu",
            f"paths.data={tmp_path}/data",
            f"paths.checkpoints={tmp_path}/ckpt",
            f"model.partial_pretrain={base}",
        ],
        env,
        600,
    )
    model_dir = Path(output.strip().splitlines()[-1])
    assert model_dir == tmp_path / "ckpt/sft/countdown_cpu/global_step_2/huggingface", output[
        -3000:
    ]
    trained = AutoModelForCausalLM.from_pretrained(model_dir)
    AutoTokenizer.from_pretrained(model_dir)
    before = AutoModelForCausalLM.from_pretrained(base).state_dict()
    moved = [k for k, v in trained.state_dict().items() if not torch.equal(v, before[k])]
    assert moved, "SFT changed no weight"

"""rlvr/cpu/sft_packing.py: the SFT loss from one packed forward equals verl's padded one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlvr.tasks import countdown


def _sft_rows(tmp_path: Path, tokenizer: Any, rows: int = 6) -> dict[str, Any]:
    """A batch of real SFT rows as verl's trainer gets them (rlvr's aligned dataset, right-padded
    to max_length 160), as a dict of (rows, 160) tensors."""
    import torch
    from omegaconf import OmegaConf

    from rlvr.train.sft_dataset import AlignedSFTDataset

    paths = countdown.prepare(
        "generate", tmp_path / "countdown", template="plain", sft=True, train_size=8, test_size=2
    ).paths
    config = OmegaConf.create(
        {"prompt_key": "sft_prompt", "response_key": "sft_response", "max_length": 160}
    )
    dataset = AlignedSFTDataset(str(paths["train"]), tokenizer, config)
    items = [dataset[i] for i in range(rows)]
    return {key: torch.stack([item[key] for item in items]) for key in items[0]}


def _trainer(model: Any) -> Any:
    """A ``PackedSFTTrainer`` with just what ``_compute_loss_and_backward`` reads (verl's
    ``__init__`` builds the model, data and process groups)."""
    from omegaconf import OmegaConf

    from rlvr.cpu.sft_packing import PackedSFTTrainer

    trainer = PackedSFTTrainer.__new__(PackedSFTTrainer)
    trainer.use_remove_padding = False
    trainer.device_name = "cpu"
    trainer.fsdp_model = trainer.model = model
    trainer.config = OmegaConf.create(
        {"ulysses_sequence_parallel_size": 1, "data": {"balance_dp_token": False}}
    )
    return trainer


@pytest.mark.no_cuda
@pytest.mark.parametrize("micro_batches", [1, 3])
def test_packed_sft_loss_and_gradients_are_verls(
    tmp_path: Path, tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch, micro_batches: int
) -> None:
    """verl's own ``_compute_loss_and_backward`` (the padded forward) and the packed one give the
    same loss and parameter gradients on real SFT rows, while the packed forward computes one
    row of far fewer tokens: the common prefix once and no padding."""
    import torch
    from transformers import AutoModelForCausalLM
    from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer

    from rlvr.cpu import compat
    from rlvr.cpu.sft_packing import PackedSFTTrainer
    from rlvr.models.tiny import build_model

    monkeypatch.setattr(torch, "autocast", torch.autocast)  # restored afterwards
    compat._no_cpu_autocast()  # as rlvr.cpu.sft installs it: verl's bf16 autocast is GPU-only
    model = AutoModelForCausalLM.from_pretrained(
        build_model(tmp_path / "m"), attn_implementation="sdpa"
    )
    shapes: list[tuple[int, ...]] = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True,
    )
    batch = _sft_rows(tmp_path, tiny_tokenizer)
    trainer = _trainer(model)
    results = []
    for method in (
        FSDPSFTTrainer._compute_loss_and_backward,
        PackedSFTTrainer._compute_loss_and_backward,
    ):
        model.zero_grad()
        loss = method(trainer, dict(batch), n_micro_batches=micro_batches)
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        results.append((loss.detach(), grads))
    (loss_verl, grads_verl), (loss_packed, grads_packed) = results
    assert loss_verl > 0
    torch.testing.assert_close(loss_packed, loss_verl, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads_packed, grads_verl, rtol=1e-4, atol=1e-6)
    real = int(batch["attention_mask"].sum())
    assert shapes[0] == (6, 160)  # verl: every row at max_length
    assert shapes[1][0] == 1 and shapes[1][1] < real  # one row, shorter than the real tokens


def test_layouts_it_does_not_handle_go_to_verls_method(tmp_path: Path, tiny_tokenizer: Any) -> None:
    """Rows that are not right-padded, or with no target after the first token, get None (the
    trainer then calls verl's own method), before any forward."""
    import torch

    from rlvr.cpu.sft_packing import packed_target_log_probs

    batch = _sft_rows(tmp_path, tiny_tokenizer, rows=2)
    keys = ("input_ids", "attention_mask", "position_ids", "loss_mask")

    def unused_model(**kwargs: Any) -> Any:
        raise AssertionError("no forward for a layout that falls back")

    left_padded = {key: batch[key].flip(1) for key in keys}
    assert packed_target_log_probs(unused_model, *(left_padded[key] for key in keys)) is None
    no_target = dict(batch, loss_mask=torch.zeros_like(batch["loss_mask"]))
    assert packed_target_log_probs(unused_model, *(no_target[key] for key in keys)) is None

"""verl 0.6.1's SFT loss from one packed forward, for the CPU path (``rlvr.cpu.sft`` installs it
unless ``RLVR_SFT_PACKED=0``).

Without flash-attn, verl's ``FSDPSFTTrainer`` cannot remove padding (``use_remove_padding`` needs
its varlen kernels), so it runs every row at ``data.max_length`` and computes the vocabulary
logits at every position. The quickstart's rows are ~60 prompt tokens, the first 26 the same
chat-template system line in every row, and ~15 answer tokens, padded to 128: 16 rows are 2,048
positions, of which the packed row below keeps about 800.

``PackedSFTTrainer`` computes the same loss from the packed rows GRPO's actor forward uses
(``rlvr.cpu.packing``): each row is split where its targets begin into a "prompt" (every token
before the first target) and a "response" (the rest of its real tokens), so the rows' common
prefix is computed once, without padding, and logits only from the first prompt's end on. Each
target's log prob is taken at the same keys and positions as in verl's forward; the loss is
verl's token mean, ``sum(loss * loss_mask) / (sum(loss_mask) + 1e-8) / n_micro_batches``
(``tests/test_cpu_sft_packing.py`` compares loss and gradients with verl's own method). The log
probs are fp32 from the model's logits, where verl's CPU path takes its cross-entropy on bf16
logits when SFT computes in bf16. The time does not fall with the positions: on the 2-core
AVX512-BF16 EPYC a step took ~6.3 s against ~7.3 (the SFT stage 0.86x, bench_sft_packing.py),
and a forward and backward of SmolLM2 over 800 positions costs about half one over 2,048.
Batches it does not handle (sequence parallelism, ``balance_dp_token``, rows that are not
right-padded or with no target after the first token) go to verl's method unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer

from rlvr.cpu.packing import response_log_probs


def packed_target_log_probs(
    module: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    loss_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(log probs, targets), each (batch, response width): every target token's log prob under
    ``module`` and the mask of the targets verl's loss reads (``loss_mask[:, 1:]``, the labels
    shifted once); None for a batch whose layout this does not handle."""
    real = attention_mask.bool()
    lengths = real.sum(1)
    if not bool((real.int().diff(dim=1) <= 0).all()):  # right padding only
        return None
    targets = loss_mask.bool() & real
    targets[:, 0] = False  # verl's shift never predicts the first token
    if not bool(targets.any(1).all()):
        return None
    first = targets.int().argmax(1)  # the first target of each row: its "response" starts there
    prompt_width, response_width = int(first.max()), int((lengths - first).max())
    rows, width = input_ids.size(0), prompt_width + response_width
    packed_ids = input_ids.new_zeros(rows, width)
    packed_positions = position_ids.new_zeros(rows, width)
    packed_real = attention_mask.new_zeros(rows, width)
    response_targets = torch.zeros(rows, response_width, dtype=torch.bool)
    for row, (start, length) in enumerate(zip(first.tolist(), lengths.tolist(), strict=True)):
        # the prompt left-padded to prompt_width, the response right-padded after it
        columns = slice(prompt_width - start, prompt_width + length - start)
        packed_ids[row, columns] = input_ids[row, :length]
        packed_positions[row, columns] = position_ids[row, :length]
        packed_real[row, columns] = 1
        response_targets[row, : length - start] = targets[row, start:length]
    micro_batch = {
        "input_ids": packed_ids,
        "attention_mask": packed_real,
        "position_ids": packed_positions,
        "responses": packed_ids[:, prompt_width:],
    }
    result = response_log_probs(module, micro_batch, temperature=1.0, calculate_entropy=False)
    if result is None:
        return None
    return result[1], response_targets.to(result[1].device)


class PackedSFTTrainer(FSDPSFTTrainer):
    """verl's SFT trainer with its loss taken from one packed forward (the module docstring)."""

    def _compute_loss_and_backward(
        self, batch: Any, do_backward: bool = True, n_micro_batches: int = 1
    ) -> torch.Tensor:
        if self.use_remove_padding or self.config.data.balance_dp_token:
            return super()._compute_loss_and_backward(batch, do_backward, n_micro_batches)
        device = self.device_name
        keys = ("input_ids", "attention_mask", "position_ids", "loss_mask")
        ids, mask, positions, loss_mask = (batch[key].to(device) for key in keys)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):  # as verl's forward
            found = packed_target_log_probs(self.fsdp_model, ids, mask, positions, loss_mask)
        if found is None:
            return super()._compute_loss_and_backward(batch, do_backward, n_micro_batches)
        batch.pop("loss_mask")  # as verl's method does
        log_probs, targets = found
        count = targets.sum()
        loss = -(log_probs * targets).sum() / (count + 1e-8) / n_micro_batches
        if do_backward:
            loss.backward()
        return loss

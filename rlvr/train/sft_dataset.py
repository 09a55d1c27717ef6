"""verl 0.6.1's ``SFTDataset`` with the loss mask aligned to the labels, so the model learns to
stop after its answer.

``SFTDataset`` marks the answer's tokens one position early (``loss_mask[:prompt_length - 1] =
0`` and the response's last token, EOS, set to 0), and ``fsdp_sft_trainer`` shifts the mask once
more against the labels (``loss_mask[:, 1:]``): the loss then trains the prompt's last token and
never EOS, and the SFT model keeps writing answers until the length limit (measured here: 73% of
SmolLM2's responses cut at 24 tokens after 16 steps). verl issue 3562; fixed upstream after 0.6.1
(verl PR 5362, following MultiTurnSFTDataset). The configs select this class through verl's own
hook for it, ``data.custom_cls`` (configs/sft/sft.yaml); the mask marks exactly the response's
tokens, EOS included, as the targets the trainer's shift expects.
"""

from __future__ import annotations

from typing import Any

from verl.utils.dataset.sft_dataset import SFTDataset


class AlignedSFTDataset(SFTDataset):
    def __getitem__(self, item: int) -> dict[str, Any]:
        row: dict[str, Any] = super().__getitem__(item)
        mask = row["loss_mask"]
        # verl's mask covers [prompt_length - 1, prompt_length + response_length - 2]; the targets
        # are [prompt_length, prompt_length + response_length - 1]: the same span, one later.
        aligned = mask.new_zeros(mask.shape)
        aligned[1:] = mask[:-1]
        row["loss_mask"] = aligned
        return row

"""Entry point of the SFT warm start: verl 0.6.1's own SFT trainer, with the CPU fixes on a
machine without GPUs (``rlvr.cpu.sft``). ``scripts/launch_sft.sh`` runs it under torchrun with
an experiment from ``configs/sft/``; the Hydra arguments are verl's."""

from __future__ import annotations


def main() -> None:
    from rlvr.cpu import sft

    sft.install()
    from verl.trainer import fsdp_sft_trainer

    fsdp_sft_trainer.main()


if __name__ == "__main__":
    main()

"""Merge verl LoRA checkpoints into loadable Hugging Face models (actor/huggingface).

Usage: uv run scripts/merge_lora.py CHECKPOINT_ROOT_OR_ACTOR_DIR [--base_model MODEL]

Merges lora_adapter/ onto its base (PEFT merge_and_unload) into actor/huggingface/, in the base
model's dtype, for one global_step_N/actor folder or every step under a checkpoint root. A thin
wrapper around ``python -m rlvr.train.lora_merge``; ``--help`` lists the options.
"""

from rlvr.train.lora_merge import main

if __name__ == "__main__":
    raise SystemExit(main())

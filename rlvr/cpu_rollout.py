"""An HF ``generate`` rollout with verl 0.6.1's rollout interface, for machines without vLLM.

verl 0.6.1 builds rollouts as ``cls(config=, model_config=, device_mesh=)`` and syncs weights
through ``resume`` / ``update_weights`` / ``release``, the path vLLM uses. Its ``HFRollout`` still
has the older constructor (it wraps the FSDP module itself). This subclass keeps ``HFRollout``'s
generation and response packing, and holds its own full-precision HF model that receives the
actor's weights in ``update_weights`` before each rollout.

``HFRollout`` passes the prompt's ``position_ids`` to ``generate``; with transformers 4.57 the
cached decoding steps then never advance their positions and greedy output degenerates
(``<answer>(1777777...``). The model's ``generate`` here drops them, and HF derives positions
from the left-padded attention mask at every step, which is what verl's position ids encode.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout


def _without_position_ids(generate: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(generate)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("position_ids", None)
        return generate(*args, **kwargs)

    return wrapper


class HFSyncRollout(HFRollout):
    def __init__(self, config: Any, model_config: Any, device_mesh: Any) -> None:
        from transformers import AutoModelForCausalLM

        BaseRollout.__init__(self, config, model_config, device_mesh)
        self.module = AutoModelForCausalLM.from_pretrained(
            self.model_config.local_path,
            dtype=torch.float32,
            attn_implementation="sdpa",
            trust_remote_code=self.model_config.trust_remote_code,
        )
        self.module.generate = _without_position_ids(self.module.generate)
        self.module.eval()

    async def resume(self, tags: list[str]) -> None:
        """Weights and cache live in host memory the whole time: nothing to bring back."""

    async def release(self) -> None:
        """Nothing to free between rollouts (see ``resume``)."""

    async def update_weights(
        self, weights: Iterable[tuple[str, torch.Tensor]], **kwargs: Any
    ) -> None:
        """Copy the actor's current weights (HF names, full tensors) into the rollout model."""
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError(
                "LoRA is not supported by the CPU HF rollout; use adapter=none"
            )
        state = self.module.state_dict()
        unknown = []
        with torch.no_grad():
            for name, tensor in weights:
                target = state.get(name)
                if target is None:
                    unknown.append(name)
                    continue
                target.copy_(tensor.detach().to(dtype=target.dtype))
        if unknown:
            raise KeyError(f"actor weights not in the rollout model: {unknown[:5]}")

    def generate_sequences(self, prompts: Any) -> Any:
        output = super().generate_sequences(prompts)
        self.module.eval()  # HFRollout flips the module back to train mode after generating
        return output

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
import os
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
            str(self.model_config.local_path),
            dtype=torch.float32,
            attn_implementation="sdpa",
            trust_remote_code=self.model_config.trust_remote_code,
        )
        self.module.generate = _without_position_ids(self.module.generate)  # type: ignore[method-assign]
        self.module.eval()
        # LoRA: the base value of every weight an adapter has been merged into.
        self._lora_base: dict[str, torch.Tensor] = {}

    async def resume(self, tags: list[str]) -> None:
        """Weights and cache live in host memory the whole time: nothing to bring back."""

    async def release(self) -> None:
        """Nothing to free between rollouts (see ``resume``)."""

    async def update_weights(
        self, weights: Iterable[tuple[str, torch.Tensor]], **kwargs: Any
    ) -> None:
        """Bring the rollout model up to the actor's weights before a rollout.

        Full fine-tuning (and LoRA's first sync with a dummy-loaded rollout): full tensors by
        HF name, copied in. LoRA afterwards: only the adapters' A and B matrices arrive (verl
        sends ``get_peft_model_state_dict``), merged here as PEFT merges them,
        ``W = W_base + scale * B @ A``, onto a kept copy of each adapted base weight.
        """
        # Test only (tests/test_learning_e2e.py's negative control): keep the initial weights.
        if os.environ.get("RLVR_TEST_FREEZE_ROLLOUT") == "1":
            return
        peft_config = kwargs.get("peft_config")
        if peft_config is not None and kwargs.get("base_sync_done", True):
            self._merge_lora(dict(weights), peft_config)
            return
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
        self._lora_base.clear()  # new base weights: merged copies are stale

    def _merge_lora(self, weights: dict[str, torch.Tensor], peft_config: Any) -> None:
        rank = int(peft_config.r)
        alpha = float(peft_config.lora_alpha)
        scale = alpha / (rank**0.5 if getattr(peft_config, "use_rslora", False) else rank)
        state = self.module.state_dict()
        base = self._lora_base
        prefixes = sorted({name.split(".lora_A.")[0] for name in weights if ".lora_A." in name})
        if not prefixes:
            raise KeyError(f"no LoRA A/B matrices among {list(weights)[:5]}")
        with torch.no_grad():
            for prefix in prefixes:
                lora_a = weights[f"{prefix}.lora_A.weight"].float()
                lora_b = weights[f"{prefix}.lora_B.weight"].float()
                target = prefix.removeprefix("base_model.model.") + ".weight"
                if target not in state:
                    raise KeyError(f"LoRA module {prefix} has no base weight {target}")
                original = base.setdefault(target, state[target].detach().clone())
                state[target].copy_(original + scale * (lora_b @ lora_a).to(original.dtype))

    def generate_sequences(self, prompts: Any) -> Any:
        output = super().generate_sequences(prompts)
        self.module.eval()  # HFRollout flips the module back to train mode after generating
        return output

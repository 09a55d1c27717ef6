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

Speed (docs/TRAINING.md, "CPU speed"), none of which changes the distribution sampled from:

- generation runs without the batch's common left padding (prompts are padded to
  ``data.max_prompt_length``), and the output gets those columns back, so every rank returns the
  width verl expects;
- plain temperature sampling draws each token by inverting the cumulative distribution with one
  uniform number per row (rlvr/models/sampling.py), not with ``torch.multinomial``'s exponential
  number per vocabulary entry: 1.8 s less per quickstart rollout, and other tokens for a seed;
- prompts repeated ``rollout.n`` times are prefilled once: the prompt (all but its last token)
  goes through the model once per distinct prompt, and the KV cache is copied to its repeats;
- with ``rollout.calculate_log_probs`` (training batches only), the sampled tokens' log
  probabilities and the per-token entropies come back as ``rollout_log_probs`` and
  ``ROLLOUT_ENTROPY_KEY``, computed from the raw logits divided by the temperature, as verl's actor
  computes them (``log_softmax(logits / T)``): with ``algorithm.rollout_correction.bypass_mode``
  they stand in for the actor's old-log-prob pass over the same weights.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from typing import Any

import torch
from tensordict import TensorDict
from verl import DataProto
from verl.utils.torch_dtypes import PrecisionType
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout

from rlvr.models.attention import register as register_grouped_sdpa
from rlvr.models.decoding import Decoding, decode, decodes_as_generate
from rlvr.models.kv_cache import with_room
from rlvr.models.prefill import shared_prompt_cache
from rlvr.models.sampling import inverse_cdf_sampling

# Per-token entropy of the rollout's sampling distribution (before top-k/top-p), for the
# ``actor/entropy`` metric that verl 0.6.1 computes only in the old-log-prob pass.
ROLLOUT_ENTROPY_KEY = "rlvr_rollout_entropy"
_PROMPT_KEYS = ("input_ids", "attention_mask", "position_ids")
# The base of the sampling streams when the config names none (verl seeds its vLLM/SGLang rollouts
# with 1000 + rank, fsdp_workers.py); a run sets its own as actor_rollout_ref.rollout.engine_kwargs
# .hf.seed (configs/rehearsal/cpu.yaml), the engine's own knob, as vLLM's seed is vLLM's.
SAMPLING_SEED = 1000


def sampling_seed(rank: int, call: int, base: int = SAMPLING_SEED) -> int:
    """The seed of a rank's ``call``-th generation (1-based), from the run's base seed."""
    return base + 100_003 * rank + call


def configured_seed(config: Any) -> int:
    """The rollout config's ``engine_kwargs.hf.seed``, or ``SAMPLING_SEED`` when unset."""
    engine = (config.get("engine_kwargs") or {}).get("hf") or {}
    seed = engine.get("seed")
    return SAMPLING_SEED if seed is None else int(seed)


def _without_position_ids(generate: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(generate)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("position_ids", None)
        return generate(*args, **kwargs)

    return wrapper


def _adoptable(target: torch.Tensor, source: torch.Tensor) -> bool:
    """``source`` can stand in for the rollout weight ``target``: same shape, dtype and device,
    contiguous, and not a view into someone else's larger tensor."""
    return (
        isinstance(target, torch.nn.Parameter)
        and source.shape == target.shape
        and source.dtype == target.dtype
        and source.device == target.device
        and source.is_contiguous()
        and source.storage_offset() == 0
        and source.untyped_storage().nbytes() == source.numel() * source.element_size()
    )


class HFSyncRollout(HFRollout):
    def __init__(self, config: Any, model_config: Any, device_mesh: Any) -> None:
        from transformers import AutoModelForCausalLM

        BaseRollout.__init__(self, config, model_config, device_mesh)
        self.module = AutoModelForCausalLM.from_pretrained(
            str(self.model_config.local_path),
            # the config's dtype: float32 (hardware/cpu.yaml), or --grpo_precision bf16's bfloat16
            dtype=PrecisionType.to_dtype(config.dtype),
            # grouped-query attention without copying the KV cache per head (the actor keeps sdpa)
            attn_implementation=register_grouped_sdpa(),
            trust_remote_code=self.model_config.trust_remote_code,
        )
        self._generate = _without_position_ids(self.module.generate)
        self.module.generate = self._shared_prompt_generate  # type: ignore[method-assign,assignment]
        self.module.eval()
        self._keep_logits = False  # set per batch: return the raw logits of every step
        self._raw_logits: tuple[torch.Tensor, ...] = ()
        # or, from ``decode``, the scores themselves: (log probs, entropies) at the temperature
        self._scores: tuple[torch.Tensor, torch.Tensor] | None = None
        # LoRA: the base value of every weight an adapter has been merged into.
        self._lora_base: dict[str, torch.Tensor] = {}
        self._calls = 0  # generate_sequences calls: with the rank, the sampling seed
        self._seed = configured_seed(config)

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
        state = self.module.state_dict(keep_vars=True)
        unknown = []
        with torch.no_grad():
            for name, tensor in weights:
                target = state.get(name)
                if target is None:
                    unknown.append(name)
                    continue
                source = tensor.detach()
                if peft_config is None and _adoptable(target, source):
                    # Full fine-tuning: verl hands over a gathered full tensor made for this sync;
                    # take it as the weight instead of copying it (540 MB a step for SmolLM2).
                    # LoRA keeps copying: its merges write into these weights.
                    target.data = source
                else:
                    target.copy_(source.to(dtype=target.dtype))
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
        # Each rank samples from a stream seeded by (run seed, rank, call): the same rank draws the
        # same tokens whatever the sharding and whatever used the global RNG before (FSDP's
        # initialisation differs between topologies), so the rehearsal can compare two
        # topologies' step 1, and a CPU run is reproducible.
        self._calls += 1
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(sampling_seed(rank, self._calls, self._seed))
            output = super().generate_sequences(prompts)
        self.module.eval()  # HFRollout flips the module back to train mode after generating
        return output

    def _generate_minibatch(self, prompts: DataProto) -> DataProto:
        """HFRollout's generation on the prompts without their common left padding, which the
        output gets back; plus the sampled tokens' log probs when configured."""
        mask = prompts.batch["attention_mask"]
        used = (mask != 0).any(dim=0).nonzero()
        start = int(used[0]) if len(used) else 0
        trimmed = DataProto(
            batch=TensorDict(
                {key: prompts.batch[key][:, start:] for key in _PROMPT_KEYS},
                batch_size=prompts.batch.batch_size,
            ),
            meta_info=prompts.meta_info,
        )
        validate = prompts.meta_info.get("validate", False)
        self._keep_logits = bool(self.config.get("calculate_log_probs", False)) and not validate
        try:
            output = super()._generate_minibatch(trimmed)
        finally:
            self._keep_logits = False
        batch = output.batch
        for key, source in (
            ("prompts", "input_ids"),
            ("input_ids", "input_ids"),
            ("attention_mask", "attention_mask"),
            ("position_ids", "position_ids"),
        ):
            batch[key] = torch.cat([prompts.batch[source][:, :start], batch[key]], dim=1)
        if self._raw_logits or self._scores is not None:
            temperature = float(prompts.meta_info.get("temperature", self.config.temperature))
            batch["rollout_log_probs"], batch[ROLLOUT_ENTROPY_KEY] = self._sampled_log_probs(
                batch, temperature
            )
            # verl 0.6.1's actor update reads the temperature from the batch, where only the
            # old-log-prob pass puts it; in bypass mode that pass does not run.
            output.meta_info["temperature"] = temperature
            self._raw_logits, self._scores = (), None
        return output

    def _sampled_log_probs(
        self, batch: TensorDict, temperature: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log prob and entropy of each response token under ``softmax(logits / T)``; 0 past a
        response's end (verl masks those positions). ``decode`` scored them as it drew; after
        ``generate``, from its logits."""
        responses = batch["responses"]
        if self._scores is not None:
            step_log_probs, step_entropy = self._scores
        else:
            logits = torch.stack(self._raw_logits, dim=1).float().div_(temperature)
            step_log_probs = logprobs_from_logits(logits, responses[:, : logits.size(1)])
            step_entropy = entropy_from_logits(logits)
        steps = step_log_probs.size(1)
        valid = batch["attention_mask"][:, -responses.size(1) :][:, :steps].float()
        log_probs = torch.zeros(responses.shape, dtype=torch.float32)
        entropy = torch.zeros(responses.shape, dtype=torch.float32)
        log_probs[:, :steps] = step_log_probs * valid
        entropy[:, :steps] = step_entropy * valid
        return log_probs, entropy

    def _shared_prompt_generate(self, **kwargs: Any) -> Any:
        """``generate`` with each distinct prompt prefilled once and, for greedy or
        temperature-only sampling, ended rows no longer computed (see the module docstring)."""
        config, samplers = inverse_cdf_sampling(kwargs["generation_config"])
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        cache = shared_prompt_cache(self.module, ids, mask)
        greedy = not kwargs.get("do_sample", config.do_sample)
        if (samplers or greedy) and ids.size(1) > 1 and decodes_as_generate(self.module):
            return self._decode(
                ids, mask, cache, kwargs, samplers[0].temperature if samplers else 0
            )
        if self._keep_logits:
            kwargs["output_logits"] = True
            kwargs["return_dict_in_generate"] = True
        if samplers:  # rlvr/models/sampling.py: the same draw without multinomial's cost
            kwargs.update(generation_config=config, do_sample=False, logits_processor=samplers)
        if cache is not None:  # each decoding step writes in place (rlvr/models/kv_cache.py)
            kwargs["past_key_values"] = with_room(cache, int(kwargs.get("max_new_tokens") or 0))
        output = self._generate(**kwargs)
        if self._keep_logits:
            self._raw_logits = tuple(output.logits)
        return output

    def _decode(
        self, ids: torch.Tensor, mask: torch.Tensor, cache: Any, kwargs: dict[str, Any], t: float
    ) -> Any:
        """``rlvr.models.decoding.decode`` in ``generate``'s output shape (sequences, logits)."""
        from transformers.generation.utils import GenerateDecoderOnlyOutput

        output: Any = GenerateDecoderOnlyOutput  # its fields are typed LongTensor, FloatTensor

        eos = kwargs.get("eos_token_id")
        how = Decoding(
            max_new_tokens=int(kwargs["max_new_tokens"]),
            stop_ids=[] if eos is None else [int(e) for e in torch.tensor(eos).reshape(-1)],
            pad_id=int(kwargs["pad_token_id"]),
            temperature=t,
            score=self._keep_logits,
        )
        decoded = decode(self.module, ids, mask, cache, how)
        self._scores = decoded.scores
        sequences = torch.cat([ids, decoded.tokens.to(ids.dtype)], dim=1)
        return output(sequences=sequences)

"""Generation backends for eval: batched HF ``generate`` (CPU or GPU) and vLLM 0.11 (CUDA).

Both take prompts as token ids (rendered once, exactly as verl renders them in training) and
return the same structure per sample: text, token count, finish reason and the sampled tokens'
log-probabilities. Log-probabilities are taken from the model's raw logits, before temperature
or top-p, which is what vLLM 0.11 returns by default (``logprobs_mode="raw_logprobs"``).

Sampling ignores the model's ``generation_config.json`` (Qwen's ships top_k=20, repetition
penalty 1.05): eval samples the way verl's rollout does, from temperature and top_p alone. The
HF backend therefore calls ``generate`` with an explicit ``GenerationConfig`` and
``use_model_defaults=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rlvr.common.messages import first_line
from rlvr.evaluation import EvalError
from rlvr.evaluation.model import ModelSource, check_context, generation_config_eos, stop_ids
from rlvr.evaluation.settings import SamplingSettings
from rlvr.models.attention import register as register_grouped_sdpa
from rlvr.models.decoding import Decoding, decode
from rlvr.models.hub import HUB_ID
from rlvr.models.kv_cache import with_room
from rlvr.models.prefill import PromptPrefills, shared_prompt_cache
from rlvr.models.sampling import inverse_cdf_sampling


@dataclass
class Generation:
    text: str
    num_tokens: int
    finish_reason: str  # "stop" (end-of-sequence token) or "length" (hit max_tokens)
    logprobs: list[float] = field(default_factory=list)  # one per generated token
    token_ids: list[int] = field(default_factory=list)


def load_tokenizer(source: ModelSource) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source.tokenizer_path)
    except Exception as exc:
        raise EvalError(load_failure("tokenizer", source.tokenizer_path, exc)) from exc


def load_failure(what: str, where: str, exc: Exception) -> str:
    message = first_line(exc)
    hint = (
        " (hub ids need network access; offline, download the model elsewhere and pass its folder)"
        if HUB_ID.match(where) and not Path(where).exists()
        else ""
    )
    return f"could not load the {what} from {where}: {message}{hint}"


class Backend(Protocol):
    name: str
    generation_eos: list[int] | None  # generation_config.json's eos ids; None: no such file

    def generate(
        self, prompts: Sequence[list[int]], sampling: SamplingSettings
    ) -> list[list[Generation]]: ...


class _RawLogprobs:
    """A logits processor that records each chosen token's log-probability under the raw model.

    ``generate`` runs processors passed to it before its temperature and top-p warpers (and, with
    ``use_model_defaults=False`` and a plain config, after nothing else), so the scores it sees
    are the model's raw logits. Only one step of log-probabilities is held at a time: the token
    chosen at step t is the last column of ``input_ids`` at step t+1, and the last step's is read
    by ``finish``; memory does not grow with response length x vocabulary.
    """

    def __init__(self) -> None:
        self.previous: Any = None
        self.chosen: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self.previous is not None:
            self.chosen.append(self.previous.gather(1, input_ids[:, -1:])[:, 0])
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, new_tokens: Any) -> Any:
        """(batch, steps) log-probabilities of ``new_tokens``, the ids ``generate`` appended."""
        import torch

        if len(self.chosen) < new_tokens.shape[1]:
            self.chosen.append(self.previous.gather(1, new_tokens[:, -1:])[:, 0])
        return torch.stack(self.chosen, dim=1)


class HFBackend:
    """Batched ``generate`` with left padding, ``batch_size`` sequences per call (why not a
    hand-written loop: docs/EVALUATION_DESIGN.md, Decoding)."""

    name = "hf"

    def __init__(
        self, source: ModelSource, batch_size: int = 16, dtype: str = "auto", device: str = "auto"
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if dtype == "auto":
            dtype = "bfloat16" if device.startswith("cuda") else "float32"
        self.device = device
        self.dtype = dtype  # recorded in the run's header: bf16 and fp32 draw other samples
        self.batch_size = batch_size
        self.tokenizer = load_tokenizer(source)
        self.tokenizer.padding_side = "left"
        weights = source.weights_path
        # On a CPU: grouped-query attention without a per-head copy of the KV cache each step
        # (rlvr/models/attention.py); transformers picks its own default elsewhere.
        attention = {"attn_implementation": register_grouped_sdpa()} if device == "cpu" else {}
        try:
            model: Any = AutoModelForCausalLM.from_pretrained(
                weights, dtype=getattr(torch, dtype), **attention
            )
            if source.kind == "lora":
                from peft import PeftModel

                model = PeftModel.from_pretrained(model, source.path).merge_and_unload()
        except Exception as exc:
            raise EvalError(load_failure("model", str(weights), exc)) from exc
        self.model = model.to(device).eval()
        self.pad_id = (
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else self.tokenizer.eos_token_id
        )
        configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        self.eos_ids = stop_ids(
            self.tokenizer, configured if isinstance(configured, list) else [configured]
        )
        # On a CPU each prompt's prefill is kept: --greedy_output decodes the sampled run's
        # prompts again (rlvr/models/prefill.py); a GPU prefills each batch at once instead.
        self.prefills = PromptPrefills(self.model) if device == "cpu" else None
        self.generation_eos = generation_config_eos(weights)  # for analyse's stop-token checks

    def generate(
        self, prompts: Sequence[list[int]], sampling: SamplingSettings
    ) -> list[list[Generation]]:
        """``sampling.n`` generations per prompt, ``batch_size`` sequences decoded together.

        Sampling draws from torch's default generator, seeded with ``sampling.seed`` inside a
        forked RNG state, so a call is reproducible and leaves the caller's RNG untouched.
        """
        import torch

        jobs = [(i, ids) for i, ids in enumerate(prompts) for _ in range(sampling.n)]
        results: list[list[Generation]] = [[] for _ in prompts]
        cuda = [torch.device(self.device).index or 0] if self.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(sampling.seed)
            for start in range(0, len(jobs), self.batch_size):
                batch = jobs[start : start + self.batch_size]
                decoded = self._generate_batch([ids for _, ids in batch], sampling)
                for (prompt_index, _), (tokens, logprobs) in zip(batch, decoded, strict=True):
                    generation = self._decode(tokens, logprobs, sampling.ignore_eos)
                    results[prompt_index].append(generation)
        return results

    def _config(self, sampling: SamplingSettings) -> Any:
        """Temperature and top-p only: no top-k, penalty or anything from generation_config.json."""
        from transformers import GenerationConfig

        greedy = sampling.temperature <= 0.0
        return GenerationConfig(
            max_new_tokens=sampling.max_tokens,
            do_sample=not greedy,
            temperature=1.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=None,
            # [] rather than None, which generate would replace with the model's eos ids
            eos_token_id=[] if sampling.ignore_eos else list(self.eos_ids),
            pad_token_id=self.pad_id,
        )

    def _generate_batch(
        self, prompts: list[list[int]], sampling: SamplingSettings
    ) -> list[tuple[list[int], list[float]]]:
        """Left-padded prompts decoded together: new token ids and raw log-probs."""
        import torch

        width = max(len(ids) for ids in prompts)
        input_ids = torch.tensor([[self.pad_id] * (width - len(ids)) + ids for ids in prompts])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts])
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        # n samples of a prompt share one prefill (jobs come grouped by prompt)
        if self.prefills is not None:
            cache = self.prefills.cache(prompts)
        else:
            cache = shared_prompt_cache(self.model, input_ids, mask)
        how = self._decoding(sampling)
        if cache is not None and how is not None:  # the CPU: ended rows stop computing
            decoded = decode(self.model, input_ids, mask, cache, how)
            return list(zip(decoded.tokens.tolist(), decoded.logprobs.tolist(), strict=True))
        return self._generate(input_ids, mask, cache, sampling)

    def _decoding(self, sampling: SamplingSettings) -> Decoding | None:
        """``rlvr.models.decoding``'s settings on a CPU, for greedy or temperature-only sampling;
        None where ``generate`` decodes (a GPU, top-p)."""
        # (generate here ignores the model's generation_config.json: use_model_defaults=False)
        if self.prefills is None or (sampling.temperature > 0 and sampling.top_p < 1.0):
            return None
        return Decoding(
            max_new_tokens=sampling.max_tokens,
            stop_ids=[] if sampling.ignore_eos else list(self.eos_ids),
            pad_id=self.pad_id,
            temperature=max(sampling.temperature, 0.0),
        )

    def _generate(
        self, input_ids: Any, mask: Any, cache: Any, sampling: SamplingSettings
    ) -> list[tuple[list[int], list[float]]]:
        """One ``generate`` call from ``cache`` (None: it prefills): new ids and raw log-probs."""
        import torch
        from transformers import LogitsProcessorList

        recorder = _RawLogprobs()  # first: it reads the raw scores the sampler then replaces
        config, samplers = inverse_cdf_sampling(self._config(sampling))
        if cache is not None:  # each decoding step writes in place (rlvr/models/kv_cache.py)
            cache = with_room(cache, sampling.max_tokens)
        with torch.no_grad():
            sequences = self.model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                generation_config=config,
                logits_processor=LogitsProcessorList([recorder, *samplers]),
                use_model_defaults=False,
                **({"past_key_values": cache} if cache is not None else {}),
            )
        new_tokens = sequences[:, input_ids.shape[1] :]
        logprobs = recorder.finish(new_tokens)
        return list(zip(new_tokens.tolist(), logprobs.tolist(), strict=True))

    def _decode(
        self, tokens: list[int], logprobs: list[float], ignore_eos: bool = False
    ) -> Generation:
        stop = (
            None
            if ignore_eos
            else next((i for i, t in enumerate(tokens) if t in self.eos_ids), None)
        )
        if stop is not None:
            tokens = tokens[: stop + 1]
        return Generation(
            text=self.tokenizer.decode(tokens, skip_special_tokens=True),
            num_tokens=len(tokens),
            finish_reason="stop" if stop is not None else "length",
            logprobs=logprobs[: len(tokens)],
            token_ids=tokens,
        )


class VLLMBackend:
    """vLLM 0.11 offline ``LLM``: the throughput path on GPUs (the `gpu` extra)."""

    name = "vllm"

    def __init__(
        self,
        source: ModelSource,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.8,
        max_model_len: int | None = None,
    ) -> None:
        from vllm import LLM

        self.tokenizer = load_tokenizer(source)
        lora = source.kind == "lora"
        self.lora_request = None
        if lora:
            from vllm.lora.request import LoRARequest

            self.lora_request = LoRARequest("eval_adapter", 1, source.path)
        self.llm = LLM(
            model=source.weights_path,
            tokenizer=source.tokenizer_path,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enable_lora=lora,
            max_lora_rank=vllm_lora_rank(source.lora_rank) if lora else 16,
            seed=0,
        )
        self.generation_eos = generation_config_eos(source.weights_path)

    def generate(
        self, prompts: Sequence[list[int]], sampling: SamplingSettings
    ) -> list[list[Generation]]:
        from vllm import SamplingParams

        greedy = sampling.temperature <= 0.0
        params = SamplingParams(
            n=sampling.n,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            max_tokens=sampling.max_tokens,
            logprobs=0,  # the sampled token's own log-probability
            seed=sampling.seed,
            ignore_eos=sampling.ignore_eos,
        )
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(ids)} for ids in prompts],
            params,
            lora_request=self.lora_request,
        )
        return [[_from_vllm(completion) for completion in out.outputs] for out in outputs]


# vLLM 0.11 takes only these as max_lora_rank (vllm/config/lora.py), at least the adapter's r.
# verl's get_vllm_max_lora_rank says the same, but its package imports vllm and zmq on import.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def vllm_lora_rank(rank: int | None) -> int:
    """The smallest max_lora_rank vLLM accepts that holds an adapter of rank ``rank`` (PEFT's
    default r, 8, where adapter_config.json has none)."""
    fitting = [allowed for allowed in VLLM_LORA_RANKS if allowed >= (rank or 8)]
    if not fitting:
        raise EvalError(f"LoRA rank {rank}: vLLM 0.11 serves ranks up to 512; use --backend hf")
    return fitting[0]


def _from_vllm(completion: Any) -> Generation:
    logprobs = [
        step[token].logprob
        for token, step in zip(completion.token_ids, completion.logprobs or [], strict=False)
    ]
    return Generation(
        text=completion.text,
        num_tokens=len(completion.token_ids),
        finish_reason="length" if completion.finish_reason == "length" else "stop",
        logprobs=logprobs,
        token_ids=list(completion.token_ids),
    )


def make_backend(
    name: str,
    source: ModelSource,
    batch_size: int = 16,
    max_tokens: int | None = None,
    dtype: str = "auto",
) -> Backend:
    """``auto`` picks vLLM when CUDA and vLLM are both there, else batched HF generation;
    ``max_tokens`` is first checked against the model's context, before any weights load."""
    import importlib.util

    import torch

    if max_tokens is not None:
        check_context(source, max_tokens)
    if name == "auto":
        has_vllm = importlib.util.find_spec("vllm") is not None
        name = "vllm" if torch.cuda.is_available() and has_vllm else "hf"
    if name == "vllm":
        if dtype != "auto":
            raise EvalError(f"--dtype {dtype}: the HF backend's option (vLLM picks its own)")
        if importlib.util.find_spec("vllm") is None:
            raise EvalError("--backend vllm needs the gpu extra: bash scripts/install_gpu.sh")
        return VLLMBackend(source)
    if name == "hf":
        return HFBackend(source, batch_size=batch_size, dtype=dtype)
    raise EvalError(f"--backend {name!r}: use auto, vllm or hf")


def prompts_per_chunk(backend: str, batch_size: int, samples_per_prompt: int) -> int:
    """Prompts per generate call. HF: enough to fill a decoding batch of ``batch_size``
    sequences; vLLM: large chunks, it schedules itself."""
    return max(1, batch_size // samples_per_prompt) if backend == "hf" else 256

"""What verl 0.6.1's FSDP actor holds in GPU memory, rebuilt in plain PyTorch at world size 1.

Used by gpu_memory_calibration.py (beside this file). Needs torch, transformers and, for LoRA,
peft; no verl. What it mirrors, from verl 0.6.1's source:
- verl/workers/fsdp_workers.py, ``_build_model_optimizer``: the actor is created in fp32
  (``torch_dtype = torch.float32 if self._is_actor``), LoRA through PEFT ``get_peft_model`` with
  ``enable_input_require_grads``, gradient checkpointing with ``use_reentrant=False``; FSDP2
  ``fully_shard`` on each decoder layer, then the root, with ``MixedPrecisionPolicy(bf16 params,
  fp32 reduce)`` (verl/utils/fsdp_utils.py ``apply_fsdp2``); AdamW from torch (foreach).
- verl/workers/actor/dp_actor.py, ``_forward_micro_batch``: bf16 autocast, one packed row of
  tokens, ``logits.div_(temperature)``, log-probs of the next tokens, entropy when asked
  (``compute_log_prob`` asks for it on the actor's old-log-prob pass; the update does not when
  ``entropy_coeff`` is 0, as in configs/objective/).
- verl/utils/torch_functional.py: with flash-attn installed (scripts/install_gpu.sh installs it)
  the log-probs come from flash-attn's fused cross-entropy, which keeps only the bf16 logits and
  writes its gradient into them in place; the entropy is ``torch.compile``d, which fuses its
  softmax away. Neither is installed on the calibration machine, so ``LabelLogProbs`` and
  ``entropy`` below reproduce their memory behaviour in chunks of ``CHUNK_ROWS`` tokens.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

CHUNK_ROWS = 256  # tokens per chunk of fp32 vocabulary work: 256 x 151936 x 4 B = 148 MiB
TEMPERATURE = 1.0  # configs/objective/*.yaml


class Meter:
    """CUDA allocator readings; all None on CPU, where the code path runs without figures."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def settle(self) -> None:
        """Free what Python still holds and return cached blocks, then restart the peak."""
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def allocated(self) -> int | None:
        return torch.cuda.memory_allocated() if self.cuda else None

    def peak(self) -> int | None:
        if not self.cuda:
            return None
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()

    def reserved_peak(self) -> int | None:
        """The allocator's peak reservation: what the device had to hold, fragmentation too."""
        return torch.cuda.max_memory_reserved() if self.cuda else None

    def peaks(self, base: int | None) -> dict[str, int | None]:
        """The peak above ``base``, the absolute peak, and the peak reservation."""
        peak = self.peak()
        return {
            "peak_extra_bytes": extra(peak, base),
            "peak_allocated_bytes": peak,
            "peak_reserved_bytes": self.reserved_peak(),
        }


def extra(peak: int | None, base: int | None) -> int | None:
    return None if peak is None or base is None else peak - base


def _init_world_of_one(device: torch.device) -> str | None:
    """Start a one-rank process group (NCCL on GPU, gloo on CPU); the error text if it fails."""
    try:
        if device.type == "cuda":
            rank_device = torch.device("cuda", torch.cuda.current_device())
            dist.init_process_group(
                "nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=rank_device
            )
        else:
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    except Exception as error:  # reported; the caller then measures without FSDP2
        return f"{type(error).__name__}: {error}"[:500]
    return None


@contextmanager
def single_process_group(device: torch.device) -> Iterator[tuple[Any, str | None]]:
    """(1-D device mesh for FSDP2, None), or (None, why) where no process group could start."""
    from torch.distributed.device_mesh import init_device_mesh

    owned = not dist.is_initialized()
    error = _init_world_of_one(device) if owned else None
    if error is not None:
        yield None, error
        return
    try:
        yield init_device_mesh(device.type, (1,)), None
    finally:
        if owned:
            dist.destroy_process_group()


def shard(model: torch.nn.Module, mesh: Any, tied: bool) -> None:
    """verl's ``apply_fsdp2``: each decoder layer (and an untied embedding) is its own FSDP2
    unit, then the root; parameters gathered in bf16, gradients reduced in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True
    )
    layer_classes = set(getattr(model, "_no_split_modules", None) or [])
    units = [
        module
        for module in model.modules()
        if type(module).__name__ in layer_classes
        or (isinstance(module, torch.nn.Embedding) and not tied)
    ]
    if not units:
        raise RuntimeError(f"no decoder layers named {sorted(layer_classes)} to shard")
    for module in units:
        fully_shard(module, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def build_actor(config: Any, device: torch.device, lora: dict[str, Any] | None) -> Any:
    """The actor as verl creates it: random fp32 weights made on ``device``, LoRA applied."""
    from transformers import AutoModelForCausalLM

    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            config, dtype=torch.float32, attn_implementation="sdpa"
        )
    model.to(device=device, dtype=torch.float32)
    if lora:
        from peft import LoraConfig, TaskType, get_peft_model

        model.enable_input_require_grads()
        model = get_peft_model(model, LoraConfig(task_type=TaskType.CAUSAL_LM, bias="none", **lora))
    return model


def set_checkpointing(model: Any, enabled: bool) -> int:
    """Switch gradient checkpointing; returns how many decoder layers now recompute."""
    if enabled:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()
    layers = set(getattr(model, "_no_split_modules", None) or [])
    return sum(
        bool(getattr(m, "gradient_checkpointing", False))
        for m in model.modules()
        if type(m).__name__.removeprefix("FSDP") in layers
    )


class LabelLogProbs(torch.autograd.Function):
    """log p(label) per token from bf16 logits, with flash-attn's fused cross-entropy memory
    profile (its ``inplace_backward=True``): forward keeps only the logits and one fp32
    log-sum-exp per token; backward writes the gradient into the logits' own storage.
    Hand-written because flash-attn is absent where the calibration runs."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        lse = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for start in range(0, logits.shape[0], CHUNK_ROWS):
            rows = slice(start, start + CHUNK_ROWS)
            lse[rows] = logits[rows].float().logsumexp(-1)
        picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1).float()
        ctx.save_for_backward(logits, labels, lse)
        return picked - lse

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits, labels, lse = ctx.saved_tensors
        for start in range(0, logits.shape[0], CHUNK_ROWS):
            rows = slice(start, start + CHUNK_ROWS)
            g = grad[rows].unsqueeze(-1)
            chunk = (logits[rows].float() - lse[rows].unsqueeze(-1)).exp_().mul_(-g)
            chunk.scatter_add_(-1, labels[rows].unsqueeze(-1), g)  # d log p_y = onehot - softmax
            logits[rows] = chunk
        return logits, None


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Per-token entropy, chunked as the compiled ``entropy_from_logits`` fuses it."""
    out = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
    for start in range(0, logits.shape[0], CHUNK_ROWS):
        chunk = logits[start : start + CHUNK_ROWS].float()
        probs = chunk.softmax(-1)
        out[start : start + CHUNK_ROWS] = chunk.logsumexp(-1) - (probs * chunk).sum(-1)
    return out


def policy_forward(
    model: Any, tokens: int, vocab: int, device: torch.device, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One packed micro batch of ``tokens`` random ids: (log-probs, entropy or None)."""
    ids = torch.randint(0, vocab, (1, tokens), device=device)
    positions = torch.arange(tokens, device=device).unsqueeze(0)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits.squeeze(0)
        logits.div_(TEMPERATURE)
        labels = torch.roll(ids, shifts=-1, dims=1).squeeze(0)
        log_probs = LabelLogProbs.apply(logits, labels)
        return log_probs, entropy(logits) if with_entropy else None


def backward_pass(model: Any, tokens: int, vocab: int, device: torch.device) -> None:
    """Forward and backward of a policy-gradient loss on one micro batch (grads accumulate)."""
    log_probs, _ = policy_forward(model, tokens, vocab, device, with_entropy=False)
    advantages = torch.randn_like(log_probs)
    (-(log_probs * advantages).mean()).backward()


def _local_bytes(tensor: torch.Tensor) -> int:
    from torch.distributed.tensor import DTensor

    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return local.numel() * local.element_size()


def resident_bytes(model: Any, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """This rank's bytes of parameters, gradients and optimizer state, by tensor sizes."""
    params = list(model.parameters())
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    return {
        "params_bytes": sum(_local_bytes(p) for p in params),
        "grads_bytes": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer_bytes": sum(_local_bytes(t) for t in state if t.dim() > 0),
    }


def timed(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``fn``'s result with its status and seconds; an out-of-memory error is a result."""
    start = time.perf_counter()
    try:
        result = {"status": "ok", **fn()}
    except torch.OutOfMemoryError:
        result = {"status": "oom"}
    except Exception as error:  # one failed measurement must not end the run
        result = {"status": "error", "error": f"{type(error).__name__}: {error}"[:500]}
    result["seconds"] = round(time.perf_counter() - start, 2)
    return result


class Actor:
    """A built actor, its optimizer and what a measurement needs to feed it."""

    def __init__(self, model: Any, vocab: int, device: torch.device) -> None:
        self.model, self.vocab, self.device = model, vocab, device
        trainable = [p for p in model.parameters() if p.requires_grad]
        # verl's optim defaults: AdamW, betas (0.9, 0.999), weight_decay 0.01, grad_clip 1.0.
        self.optimizer = torch.optim.AdamW(trainable, lr=1e-6, weight_decay=0.01)
        self.meter = Meter(device)

    def static(self, warm_tokens: int) -> dict[str, Any]:
        """Two updates (the first creates AdamW's state), grads kept as verl keeps them until
        the next mini batch's ``zero_grad``: resident bytes, and the optimizer step's own peak."""
        self.model.train()
        step_extra = None
        for _ in range(2):
            backward_pass(self.model, warm_tokens, self.vocab, self.device)
            self.meter.settle()
            base = self.meter.allocated()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=1.0)
            self.optimizer.step()
            step_extra = extra(self.meter.peak(), base)
        self.meter.settle()
        return {
            **resident_bytes(self.model, self.optimizer),
            "allocated_bytes": self.meter.allocated(),
            "optimizer_step_extra_bytes": step_extra,
        }

    def update(self, tokens: int, checkpointing: bool) -> dict[str, Any]:
        """Peak above the resident state during one micro batch's forward and backward."""
        layers = set_checkpointing(self.model, checkpointing)
        self.model.train()
        self.meter.settle()
        base = self.meter.allocated()
        backward_pass(self.model, tokens, self.vocab, self.device)
        return {**self.meter.peaks(base), "checkpointed_layers": layers}

    def log_prob(self, tokens: int) -> dict[str, Any]:
        """Peak above the resident state during a no-grad log-prob and entropy pass."""
        self.model.eval()
        self.meter.settle()
        base = self.meter.allocated()
        with torch.no_grad():
            policy_forward(self.model, tokens, self.vocab, self.device, with_entropy=True)
        return self.meter.peaks(base)

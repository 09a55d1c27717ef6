"""Per-GPU and per-node memory of a verl 0.6.1 GRPO run, from the model's shape and the run's
settings: the formulas behind pre-flight's memory planner (rlvr/planning/memory_plan.py).

What verl holds when (verl/workers/fsdp_workers.py, verl/workers/actor/dp_actor.py at v0.6.1):
- Between phases each GPU keeps its shard of the actor's parameters (``fsdp_config.model_dtype``,
  fp32 by default) and AdamW's two moments, unless ``param_offload`` / ``optimizer_offload`` move
  them to host RAM; ``update_actor`` and ``compute_log_prob`` load them back first. Gradients
  exist only during the update (``update_policy`` ends with ``zero_grad()``, which frees them).
- The reference model (when a KL term is on and the actor is not LoRA: a LoRA actor is its own
  reference with the adapters off) is the same model in ``ref.fsdp_config.model_dtype`` (fp32 by
  default), on the actor's device mesh. verl always keeps it in host RAM, whatever
  ``ref.fsdp_config.param_offload`` says ("We force reference policy to use CPUOffload":
  ``_build_model_optimizer``), and FSDP streams it in layer by layer.
- ``rollout_mode`` wakes vLLM, which takes ``gpu_memory_utilization`` x the GPU's memory (its
  weights, activations and KV cache), plus its CUDA graphs, captured after the KV cache is sized;
  ``trainer_mode`` puts it to sleep: level 2 drops weights and KV cache, level 1 (forced by
  ``layered_summon``, the LoRA setting) keeps the weights in host RAM
  (verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py; level 2 is verl's default from vLLM
  0.8.5 on, verl/third_party/vllm/__init__.py).
- Activations per micro batch scale with its token count, capped by ``ppo_max_token_len_per_gpu``
  (update) and ``log_prob_max_token_len_per_gpu`` (log-prob passes) under dynamic batching.

The activation coefficients are structural (bytes of bf16 copies of the logits and of each
layer's saved tensors), fitted to plain-PyTorch measurements of the recipes' base models on one
H200 (benchmarks/results/gpu_memory_h200.json; docs/TRAINING.md, "Measured GPU memory"); the
allowances (CUDA context, vLLM's non-KV memory, worker processes) are round numbers, named below.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.models.architectures import Architecture, decoder_layer_parameters, parameter_count

GIB = 2**30
BF16 = 2
# The update keeps four bf16 copies of the logits at its peak: the logits, the log-prob gradient
# written into them in place, and the copies autograd makes for dp_actor.py's in-place
# ``logits.div_(temperature)`` on a view (measured: 8V bytes per token).
UPDATE_LOGIT_COPIES = 4
# The no-grad log-prob pass keeps one (flash-attn's cross-entropy and the compiled entropy
# stream over it).
LOG_PROB_LOGIT_COPIES = 1
# With checkpointing, each layer keeps its bf16 input (2h bytes a token), and about a third of
# one layer's activations are alive at once while that layer is recomputed and back-propagated.
RECOMPUTE_SHARE = 0.35
# Without it, bytes a token a layer: 15 h + 6.5 intermediate + 11.5 (q + 2 kv) (a fit through
# the four models' measurements, each within 0.2%: 7.5, 3.25 and 5.75 bf16 tensors of each width).
PER_LAYER_HIDDEN, PER_LAYER_MLP, PER_LAYER_QKV = 15.0, 6.5, 11.5
# The log-prob pass keeps a few hidden-size tensors a token beside the logits, and fp32
# row-chunk buffers of the log-softmax and entropy kernels (about 0.3-0.5 GiB measured).
LOG_PROB_HIDDEN_COPIES = 4
LOG_PROB_WORKSPACE_BYTES = GIB // 2
# Allowances, not measurements: the CUDA context, NCCL buffers and kernel workspaces each GPU
# process holds outside PyTorch's tensors; and what vLLM takes from its share before the KV cache
# (activations of its profiling run, CUDA graphs).
GPU_RUNTIME_BYTES = int(1.5 * GIB)
VLLM_NON_KV_BYTES = 2 * GIB
# vLLM's CUDA graphs (``enforce_eager: false``), outside its ``gpu_memory_utilization`` share.
VLLM_CUDA_GRAPH_BYTES = GIB
# Host RAM of one GPU worker process (Python, torch, CUDA, verl, vLLM in the same process), and of
# the driver with Ray's daemons: allowances, rounded up.
HOST_PER_WORKER_BYTES = 8 * GIB
HOST_DRIVER_BYTES = 4 * GIB


@dataclass(frozen=True)
class RunShape:
    """The settings of a run that size its memory (rlvr/planning/memory_plan.py reads them)."""

    gpus_per_node: int
    shard: int  # ranks the actor (and the reference, on its mesh) is sharded over
    lora_parameters: int  # 0: full fine-tuning
    actor_dtype_bytes: int
    ref_dtype_bytes: int
    param_offload: bool
    optimizer_offload: bool
    has_ref: bool
    checkpointing: bool
    update_tokens: int  # per micro batch, per GPU
    log_prob_tokens: int
    vllm_fraction: float  # gpu_memory_utilization
    tensor_parallel: int
    rows_per_engine: int  # responses one vLLM engine generates per step
    tokens_per_row: int  # prompt + response budget
    vllm_sleep_level: int  # 1: weights to host RAM while asleep; 2: dropped
    hf_model_saved: bool
    vllm_cuda_graphs: bool = True  # enforce_eager false
    # The settings that cap a micro batch, and the tokens in one unit of each (1 for a token cap
    # under dynamic batching, a whole row's budget for a micro batch size in rows).
    update_key: str = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
    log_prob_key: str = "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"
    update_unit: int = 1
    log_prob_unit: int = 1


def parameters(arch: Architecture, run: RunShape) -> tuple[int, int]:
    """(all parameters the actor holds, trainable ones)."""
    base = parameter_count(arch)
    if run.lora_parameters:
        return base + run.lora_parameters, run.lora_parameters
    return base, base


def actor_params_bytes(arch: Architecture, run: RunShape) -> int:
    return parameters(arch, run)[0] * run.actor_dtype_bytes // run.shard


def optimizer_bytes(arch: Architecture, run: RunShape) -> int:
    """AdamW's exp_avg and exp_avg_sq, in the parameters' dtype."""
    return 2 * parameters(arch, run)[1] * run.actor_dtype_bytes // run.shard


def gradient_bytes(arch: Architecture, run: RunShape) -> int:
    return parameters(arch, run)[1] * run.actor_dtype_bytes // run.shard


def ref_params_bytes(arch: Architecture, run: RunShape) -> int:
    return parameter_count(arch) * run.ref_dtype_bytes // run.shard if run.has_ref else 0


def gathered_bytes(arch: Architecture) -> int:
    """FSDP's unsharded bf16 copies during compute: the embeddings (the root unit, tied to the
    output layer) and two decoder layers (the current one and the one prefetched)."""
    return BF16 * (arch.vocab_size * arch.hidden_size + 2 * decoder_layer_parameters(arch))


def layer_bytes_per_token(arch: Architecture) -> float:
    """One decoder layer's activations kept for backward, per token, without checkpointing."""
    qkv = arch.q_width + 2 * arch.kv_width
    return (
        PER_LAYER_HIDDEN * arch.hidden_size
        + PER_LAYER_MLP * arch.intermediate_size
        + PER_LAYER_QKV * qkv
    )


def update_activation_bytes(arch: Architecture, tokens: int, checkpointing: bool) -> int:
    """Activations of one update micro batch of ``tokens`` tokens, at their peak."""
    logits = UPDATE_LOGIT_COPIES * BF16 * arch.vocab_size
    layers = arch.num_hidden_layers
    if checkpointing:
        body = layers * BF16 * arch.hidden_size + RECOMPUTE_SHARE * layer_bytes_per_token(arch)
    else:
        body = layers * layer_bytes_per_token(arch)
    return int(tokens * (logits + body))


def log_prob_activation_bytes(arch: Architecture, tokens: int) -> int:
    """A no-grad log-prob (and entropy) pass over ``tokens`` tokens."""
    per_token = BF16 * (LOG_PROB_LOGIT_COPIES * arch.vocab_size)
    per_token += BF16 * LOG_PROB_HIDDEN_COPIES * arch.hidden_size
    return tokens * per_token + (LOG_PROB_WORKSPACE_BYTES if tokens else 0)


def kv_bytes_per_token(arch: Architecture, tensor_parallel: int) -> int:
    """vLLM's bf16 KV cache: a key and a value per layer, split over the TP ranks."""
    return 2 * arch.num_hidden_layers * arch.kv_width * BF16 // tensor_parallel


def vllm_weight_bytes(arch: Architecture, tensor_parallel: int) -> int:
    return parameter_count(arch) * BF16 // tensor_parallel


@dataclass(frozen=True)
class Part:
    """One named amount of memory in a phase."""

    name: str
    bytes: int


def resident_parts(arch: Architecture, run: RunShape) -> list[Part]:
    """What each GPU holds between phases."""
    parts = [Part("CUDA context (allowance)", GPU_RUNTIME_BYTES)]
    if not run.param_offload:
        parts.append(Part("actor params", actor_params_bytes(arch, run)))
    if not run.optimizer_offload:
        parts.append(Part("AdamW", optimizer_bytes(arch, run)))
    return parts


def loaded_parts(arch: Architecture, run: RunShape, optimizer: bool) -> list[Part]:
    """What verl loads back from host RAM for a compute phase."""
    parts = []
    if run.param_offload:
        parts.append(Part("actor params (loaded)", actor_params_bytes(arch, run)))
    if optimizer and run.optimizer_offload:
        parts.append(Part("AdamW (loaded)", optimizer_bytes(arch, run)))
    return parts


@dataclass
class Phase:
    name: str
    parts: list[Part]

    @property
    def bytes(self) -> int:
        return sum(part.bytes for part in self.parts)


def gpu_phases(arch: Architecture, run: RunShape, capacity: int | None) -> list[Phase]:
    """Each GPU's peak in the three phases of a step; ``capacity`` sizes vLLM's share."""
    resident = resident_parts(arch, run)
    vllm = int(run.vllm_fraction * capacity) if capacity else 0
    graphs = VLLM_CUDA_GRAPH_BYTES if run.vllm_cuda_graphs else 0
    rollout = Phase(
        "rollout (vLLM awake)",
        [
            *resident,
            Part(f"vLLM ({run.vllm_fraction:g} of the GPU)", vllm),
            Part("vLLM CUDA graphs (allowance)", graphs),
        ],
    )
    gathered = Part("gathered layers", gathered_bytes(arch))
    log_prob = Phase(
        "log-prob pass",
        [
            *resident,
            *loaded_parts(arch, run, optimizer=False),
            gathered,
            Part(
                f"activations ({run.log_prob_tokens} tokens)",
                log_prob_activation_bytes(arch, run.log_prob_tokens),
            ),
        ],
    )
    checkpointing = "checkpointed" if run.checkpointing else "not checkpointed"
    activations = update_activation_bytes(arch, run.update_tokens, run.checkpointing)
    update = Phase(
        "actor update",
        [
            *resident,
            *loaded_parts(arch, run, optimizer=True),
            Part("gradients", gradient_bytes(arch, run)),
            # AdamW's foreach step needs one more gradient-sized buffer, after the activations
            # are freed: whichever is larger sets the peak.
            max(
                Part(f"activations ({run.update_tokens} tokens, {checkpointing})", activations),
                Part("AdamW step", gradient_bytes(arch, run)),
                key=lambda part: part.bytes,
            ),
            gathered,
        ],
    )
    return [rollout, log_prob, update]


def host_phase(arch: Architecture, run: RunShape) -> Phase:
    """A node's host RAM at a checkpoint save, its highest point."""
    node = run.gpus_per_node
    parts = [
        Part(
            "processes (allowance)",
            HOST_DRIVER_BYTES + node * HOST_PER_WORKER_BYTES,
        )
    ]
    if run.param_offload:
        parts.append(Part("offloaded actor parameters", node * actor_params_bytes(arch, run)))
    if run.optimizer_offload:
        parts.append(Part("offloaded AdamW state", node * optimizer_bytes(arch, run)))
    if run.has_ref:  # verl keeps the reference in host RAM (module docstring)
        parts.append(Part("reference", node * ref_params_bytes(arch, run)))
    if run.vllm_sleep_level == 1:
        parts.append(
            Part("vLLM weights asleep", node * vllm_weight_bytes(arch, run.tensor_parallel))
        )
    # A save copies each rank's shards to host memory, and rank 0 gathers the whole model for
    # actor/huggingface (verl's FSDPCheckpointManager).
    shards = node * (actor_params_bytes(arch, run) + optimizer_bytes(arch, run))
    full = parameters(arch, run)[0] * run.actor_dtype_bytes if run.hf_model_saved else 0
    parts.append(Part("checkpoint save", shards + full))
    return Phase("host RAM per node", parts)

"""Pre-flight's memory planner: will this run fit the GPU, and the node's RAM, before it starts?

Usage: python -m rlvr.train.memory_plan EXPERIMENT [hydra overrides...] [--gpu_gib N] [--host_gib N]
(pre-flight runs the same check for every GPU experiment; the flags plan for another machine.)

From the composed config and the model's shape (a local folder's config.json, or the table of
base models in rlvr/models/architectures.py), it estimates each GPU's peak in the three phases of
a GRPO step (rollout with vLLM awake, the log-prob passes, the actor update; formulas in
rlvr/train/memory_model.py) and the host RAM of a node, prints them as a small table, and refuses
a run that cannot fit with one line naming the setting to change. The GPU is the one this machine
has; without one, the one the hardware overlay declares (``hardware_facts``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlvr.models.architectures import Architecture, by_hf_id, from_config_json
from rlvr.train import memory_model as mm
from rlvr.train.checkpoint_budget import DTYPE_BYTES, lora_rank, model_size
from rlvr.train.memory_model import GIB, Phase, RunShape, gpu_phases, host_phase

ACTOR = "actor_rollout_ref.actor"
TOKENS_KEY = f"{ACTOR}.ppo_max_token_len_per_gpu"
LOG_PROB_KEY = "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu"
UTILIZATION_KEY = "actor_rollout_ref.rollout.gpu_memory_utilization"
# Ray's memory monitor kills a worker once the node's memory use passes this share
# (RAY_memory_usage_threshold, https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html).
RAY_MEMORY_THRESHOLD = 0.95


@dataclass(frozen=True)
class Machine:
    gpu: str
    gpu_bytes: int | None
    host_bytes: int | None
    source: str


@dataclass
class MemoryPlan:
    model: str
    machine: Machine
    phases: list[Phase]
    host: Phase
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def peak(self) -> Phase:
        return max(self.phases, key=lambda phase: phase.bytes)

    def lines(self) -> list[str]:
        """The table pre-flight prints."""
        gpu = self.machine
        size = "?" if gpu.gpu_bytes is None else f"{gpu.gpu_bytes / GIB:.1f} GiB"
        out = [f"memory per GPU: {self.model} on {gpu.gpu} ({size}, {gpu.source})"]
        out += [f"  {'phase':<24}{'GiB':>7}  made of"]
        for phase in [*self.phases, self.host]:
            parts = ", ".join(f"{p.name} {p.bytes / GIB:.1f}" for p in phase.parts if p.bytes)
            out.append(f"  {phase.name:<24}{phase.bytes / GIB:>7.1f}  {parts}")
        if gpu.gpu_bytes:
            peak = self.peak
            share = peak.bytes / gpu.gpu_bytes
            out.append(f"  peak: {peak.name}, {share:.0%} of the GPU")
        return out + [f"  note: {note}" for note in self.notes]


def architecture(config: Any) -> tuple[Architecture, str] | None:
    """The model's shape: a local folder's config.json, else the table's row for a hub id."""
    path = str(config.actor_rollout_ref.model.path)
    declared = Path(path).expanduser() / "config.json"
    if declared.is_file():
        try:
            return from_config_json(json.loads(declared.read_text()), path), str(declared)
        except (KeyError, TypeError, ValueError):
            return None
    arch = by_hf_id(path)
    return None if arch is None else (arch, "rlvr/models/architectures.py")


def _shard(fsdp: Any, world: int) -> int:
    size = int(fsdp.get("fsdp_size", -1) or -1)
    return size if 0 < size < world else world


def run_shape(config: Any) -> RunShape:
    """The settings that size memory, read from the composed config."""
    model, actor, ref, rollout = (
        config.actor_rollout_ref[k] for k in ("model", "actor", "ref", "rollout")
    )
    per_node, nodes = int(config.trainer.n_gpus_per_node), int(config.trainer.nnodes)
    world, tp = per_node * nodes, int(rollout.get("tensor_model_parallel_size", 1) or 1)
    rank = lora_rank(config)
    size = model_size(config)
    lora_params = 0
    if rank and size is not None and size.lora_params_per_rank:
        lora_params = rank * size.lora_params_per_rank
    update_tokens = int(actor.ppo_max_token_len_per_gpu)
    log_prob_tokens = int(rollout.get("log_prob_max_token_len_per_gpu") or update_tokens)
    if not actor.get("use_dynamic_bsz"):  # fixed micro batches of whole rows
        row = int(config.data.max_prompt_length) + int(config.data.max_response_length)
        update_tokens = int(actor.get("ppo_micro_batch_size_per_gpu") or 1) * row
        log_prob_tokens = int(rollout.get("log_prob_micro_batch_size_per_gpu") or 1) * row
    kl = actor.get("use_kl_loss") or config.algorithm.get("use_kl_in_reward")
    return RunShape(
        gpus_per_node=per_node,
        shard=_shard(actor.fsdp_config, world),
        ref_shard=_shard(ref.fsdp_config, world),
        lora_parameters=lora_params,
        actor_dtype_bytes=DTYPE_BYTES[str(actor.fsdp_config.get("model_dtype") or "fp32")],
        ref_dtype_bytes=DTYPE_BYTES[str(ref.fsdp_config.get("model_dtype") or "fp32")],
        param_offload=bool(actor.fsdp_config.get("param_offload")),
        optimizer_offload=bool(actor.fsdp_config.get("optimizer_offload")),
        has_ref=bool(kl) and rank == 0,  # a LoRA actor is its own reference (adapters off)
        ref_offload=bool(ref.fsdp_config.get("param_offload")),
        checkpointing=bool(model.get("enable_gradient_checkpointing")),
        update_tokens=update_tokens,
        log_prob_tokens=log_prob_tokens,
        vllm_fraction=float(rollout.get("gpu_memory_utilization", 0.5)),
        tensor_parallel=tp,
        rows_per_engine=int(config.data.train_batch_size) * int(rollout.n) * tp // world,
        tokens_per_row=int(config.data.max_prompt_length) + int(config.data.max_response_length),
        vllm_sleep_level=2 if rank and rollout.get("layered_summon") else 1,
        hf_model_saved="hf_model" in set(actor.checkpoint.save_contents),
    )


def machine(config: Any) -> Machine:
    """This machine's first GPU and RAM when it has a GPU, else what the overlay declares."""
    import psutil
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        host = psutil.virtual_memory().total
        return Machine(props.name, props.total_memory, host, "this machine's")
    facts = config.get("hardware_facts") or {}
    gpu_gib, host_gib = facts.get("gpu_memory_gib"), facts.get("host_memory_gib")
    return Machine(
        str(facts.get("gpu", "GPU")),
        None if gpu_gib is None else int(float(gpu_gib) * GIB),
        None if host_gib is None else int(float(host_gib) * GIB),
        "declared in hardware_facts: no GPU here",
    )


def _tokens_fix(key: str, now: int, fixed: int, per_token: float, capacity: int) -> str:
    """Lower a token cap: to the largest value that fits, when one does."""
    room = capacity - fixed
    if room <= 0 or per_token <= 0:
        return f"lower {key} ({now} now)"
    return f"lower {key} ({now} now; up to about {int(room / per_token) // 1000 * 1000} fits)"


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def _update_fix(arch: Architecture, run: RunShape, capacity: int) -> str:
    if not run.checkpointing:
        return "set actor_rollout_ref.model.enable_gradient_checkpointing=true"
    update = gpu_phases(arch, replace(run, update_tokens=0), capacity)[2]
    step = mm.gradient_bytes(arch, run)  # AdamW's buffers, after the activations are freed
    fixed = update.bytes - step
    per_token = (
        mm.update_activation_bytes(arch, 2000, True) - mm.update_activation_bytes(arch, 1000, True)
    ) / 1000
    # A micro batch holds at least one whole response: below that no token cap helps.
    if fixed + max(step, run.tokens_per_row * per_token) > capacity:
        return (
            f"the actor's state needs {_gib(fixed)} a GPU, too much for one "
            f"{run.tokens_per_row}-token response: train LoRA (adapter=lora32) or shard it over "
            "more GPUs (trainer.n_gpus_per_node)"
        )
    return _tokens_fix(TOKENS_KEY, run.update_tokens, fixed, per_token, capacity)


def _log_prob_fix(arch: Architecture, run: RunShape, capacity: int) -> str:
    fixed = gpu_phases(arch, replace(run, log_prob_tokens=0), capacity)[1].bytes
    key = TOKENS_KEY if run.log_prob_tokens == run.update_tokens else f"{LOG_PROB_KEY} (and ref's)"
    per_token = (
        mm.log_prob_activation_bytes(arch, 2000) - mm.log_prob_activation_bytes(arch, 1000)
    ) / 1000
    return _tokens_fix(key, run.log_prob_tokens, fixed, per_token, capacity)


def _rollout_fix(arch: Architecture, run: RunShape, capacity: int) -> str:
    kept = sum(part.bytes for part in mm.resident_parts(arch, run))
    needed = mm.vllm_weight_bytes(arch, run.tensor_parallel) + mm.VLLM_NON_KV_BYTES
    most = (capacity - kept) / capacity
    if most * capacity > needed * 1.2:
        return (
            f"lower {UTILIZATION_KEY} ({run.vllm_fraction:g} now; at most {most:.2f} fits beside "
            f"the {_gib(kept)} the actor keeps)"
        )
    for flag, on in (
        ("optimizer_offload", run.optimizer_offload),
        ("param_offload", run.param_offload),
    ):
        if not on:
            return (
                f"set {ACTOR}.fsdp_config.{flag}=true (the actor keeps {_gib(kept)} during rollout)"
            )
    return "shard the actor over more GPUs (trainer.n_gpus_per_node)"


def _vllm_notes(arch: Architecture, run: RunShape, capacity: int) -> tuple[list[str], list[str]]:
    """(notes, problems) about vLLM's own share: its weights first, then the KV cache."""
    weights = mm.vllm_weight_bytes(arch, run.tensor_parallel)
    room = int(run.vllm_fraction * capacity) - weights - mm.VLLM_NON_KV_BYTES
    if room <= 0:
        least = (weights + mm.VLLM_NON_KV_BYTES) / capacity + 0.05
        return [], [
            f"{UTILIZATION_KEY}={run.vllm_fraction:g} gives vLLM "
            f"{_gib(run.vllm_fraction * capacity)}, "
            f"no room for a KV cache beside its {_gib(weights)} of weights: raise it to at "
            f"least {least:.2f}"
        ]
    held = room // mm.kv_bytes_per_token(arch, run.tensor_parallel)
    batch = run.rows_per_engine * run.tokens_per_row
    note = f"vLLM's KV cache holds ~{held:,} tokens, {min(held / batch, 1):.0%} of its "
    note += f"{run.rows_per_engine} responses' worst case ({batch:,} tokens)"
    if held < batch:
        note += ": the rest wait their turn (slower, not out of memory)"
    return [note], []


def _host_problem(host: Phase, run: RunShape, machine: Machine) -> list[str]:
    if machine.host_bytes is None or host.bytes <= RAY_MEMORY_THRESHOLD * machine.host_bytes:
        return []
    settings = {
        "offloaded actor parameters": f"{ACTOR}.fsdp_config.param_offload=false",
        "offloaded AdamW state": f"{ACTOR}.fsdp_config.optimizer_offload=false",
        "offloaded reference": "actor_rollout_ref.ref.fsdp_config.param_offload=false",
    }
    offloaded = [part for part in host.parts if part.name in settings]
    fix = "a node with more RAM"
    if offloaded:
        fix = f"set {settings[max(offloaded, key=lambda part: part.bytes).name]} or use " + fix
    return [
        f"host RAM: a node needs ~{_gib(host.bytes)} at a checkpoint save, over "
        f"{RAY_MEMORY_THRESHOLD:.0%} of its {_gib(machine.host_bytes)} (where Ray's memory "
        f"monitor kills workers): {fix}"
    ]


def _gpu_problem(arch: Architecture, run: RunShape, gpu: Machine, over: list[Phase]) -> str:
    """One line: every phase that does not fit, worst first, each with its fix; a fix already
    named (the update's token cap also caps the log-prob passes, which follow it) is not
    repeated."""
    fixes = {"rollout": _rollout_fix, "log-prob": _log_prob_fix, "actor update": _update_fix}
    said, settings = [], set()
    for phase in over:
        fix = next(f for prefix, f in fixes.items() if phase.name.startswith(prefix))
        advice = fix(arch, run, gpu.gpu_bytes or 0)
        setting = advice.split(" (")[0]
        if setting not in settings:
            said.append(f"the {phase.name} needs ~{_gib(phase.bytes)} a GPU: {advice}")
            settings.add(setting)
    return f"GPU memory over the {_gib(gpu.gpu_bytes or 0)} of the {gpu.gpu}: " + "; ".join(said)


def plan(config: Any, on: Machine | None = None) -> MemoryPlan | None:
    """The memory plan of a GPU run; None for the CPU path (the HF rollout) or an unknown shape."""
    if config.actor_rollout_ref.rollout.name != "vllm":
        return None
    found = architecture(config)
    if found is None:
        return None
    arch, source = found
    run, gpu = run_shape(config), on or machine(config)
    capacity = gpu.gpu_bytes
    result = MemoryPlan(
        f"{arch.hf_id} (shape from {source})",
        gpu,
        gpu_phases(arch, run, capacity),
        host_phase(arch, run),
    )
    if capacity is None:
        result.notes.append("GPU memory unknown: declare hardware_facts.gpu_memory_gib")
        return result
    result.notes, result.problems = _vllm_notes(arch, run, capacity)
    over = sorted(
        (phase for phase in result.phases if phase.bytes > capacity), key=lambda p: -p.bytes
    )
    if over:
        result.problems.insert(0, _gpu_problem(arch, run, gpu, over))
    result.problems += _host_problem(result.host, run, gpu)
    return result


def main(argv: list[str] | None = None) -> int:
    from rlvr.train.config import ConfigError, compose_checked

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", help="an experiment in configs/ (e.g. countdown_qwen3_4b)")
    parser.add_argument("overrides", nargs="*", help="hydra overrides, key=value")
    parser.add_argument("--gpu_gib", type=float, help="plan for a GPU of this many GiB")
    parser.add_argument("--host_gib", type=float, help="plan for nodes with this much RAM (GiB)")
    args = parser.parse_args(argv)
    try:
        config = compose_checked(args.experiment, args.overrides)
    except ConfigError as exc:
        print(f"memory plan: error: {exc}", file=sys.stderr)
        return 2
    here = machine(config)
    if args.gpu_gib is not None or args.host_gib is not None:
        gpu = int(args.gpu_gib * GIB) if args.gpu_gib is not None else here.gpu_bytes
        host = int(args.host_gib * GIB) if args.host_gib is not None else here.host_bytes
        here = Machine("GPU" if args.gpu_gib else here.gpu, gpu, host, "given on the command line")
    result = plan(config, here)
    if result is None:
        print(f"memory plan: {args.experiment}: nothing to plan (a CPU run, or an unknown model)")
        return 0
    print("\n".join(result.lines()))
    for problem in result.problems:
        print(f"memory plan: {problem}", file=sys.stderr)
    return 2 if result.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

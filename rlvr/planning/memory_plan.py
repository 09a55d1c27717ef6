"""Pre-flight's memory planner: will this run fit the GPU, and the node's RAM, before it starts?

Usage: python -m rlvr.planning.memory_plan EXPERIMENT [overrides...] [--gpu_gib N] [--host_gib N]
(pre-flight runs the same check for every GPU experiment; the flags plan for another machine.)

From the composed config and the model's shape (a local folder's config.json, or the table of
base models in rlvr/models/architectures.py), it estimates each GPU's peak in the three phases of
a GRPO step (rollout with vLLM awake, the log-prob passes, the actor update; formulas in
rlvr/planning/memory_model.py) and the host RAM of a node, prints them as a small table, and refuses
a run that cannot fit with one line naming the setting to change. The GPU is the one this machine
has; without one, the one the hardware overlay declares (``hardware_facts``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from typing import Any

from rlvr.models.architectures import (
    TABLE,
    Architecture,
    for_model_path,
    lora_parameters_per_rank,
)
from rlvr.planning import memory_model as mm
from rlvr.planning.checkpoint_budget import DTYPE_BYTES, lora_rank, shard_size, world_size
from rlvr.planning.memory_model import GIB, Phase, RunShape, gpu_phases, host_phase

ACTOR = "actor_rollout_ref.actor"
UTILIZATION_KEY = "actor_rollout_ref.rollout.gpu_memory_utilization"
# Ray's memory monitor kills a worker once the node's memory use passes this share
# (RAY_memory_usage_threshold, https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html).
RAY_MEMORY_THRESHOLD = 0.95
# Suggested settings aim the peak at this share of the GPU, and a plan above it gets a note:
# the estimate leaves out allocator fragmentation (PyTorch's reserved minus allocated).
FILL_LIMIT = 0.9


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
    return for_model_path(str(config.actor_rollout_ref.model.path))


def _micro_batch(
    settings: Any, dynamic: bool, cap_key: str, size_key: str, world: int, row: int
) -> tuple[int, str, int]:
    """(tokens a micro batch holds at most, the setting that caps it, tokens in one unit of that
    setting): a token cap under dynamic batching, else a micro batch size in rows (per GPU, or
    verl's global one, which its worker divides by the world size)."""
    if dynamic:
        tokens = int(settings.get(cap_key) or 16384)  # verl's default cap
        return tokens, cap_key, 1
    rows = settings.get(f"{size_key}_per_gpu")
    if rows is None and settings.get(size_key):
        rows, size_key = max(1, int(settings.get(size_key)) // world), size_key
    else:
        size_key = f"{size_key}_per_gpu"
    return int(rows or 1) * row, size_key, row


def run_shape(config: Any, arch: Architecture) -> RunShape:
    """The settings that size memory, read from the composed config."""
    model, actor, rollout = (config.actor_rollout_ref[k] for k in ("model", "actor", "rollout"))
    ref = config.actor_rollout_ref.ref
    world, tp = world_size(config), int(rollout.get("tensor_model_parallel_size", 1) or 1)
    rank = lora_rank(config)
    row = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    update = _micro_batch(
        actor, bool(actor.get("use_dynamic_bsz")), "ppo_max_token_len_per_gpu",
        "ppo_micro_batch_size", world, row,
    )  # fmt: skip
    log_prob = _micro_batch(
        rollout, bool(rollout.get("log_prob_use_dynamic_bsz")), "log_prob_max_token_len_per_gpu",
        "log_prob_micro_batch_size", world, row,
    )  # fmt: skip
    kl = actor.get("use_kl_loss") or config.algorithm.get("use_kl_in_reward")
    # A LoRA actor is its own reference (adapters off): verl's ref_in_actor.
    own_ref = rank > 0 or bool(model.get("lora_adapter_path"))
    return RunShape(
        gpus_per_node=int(config.trainer.n_gpus_per_node),
        shard=shard_size(config),  # the reference shares the actor's mesh
        lora_parameters=rank * lora_parameters_per_rank(arch) if rank else 0,
        actor_dtype_bytes=DTYPE_BYTES[str(actor.fsdp_config.get("model_dtype") or "fp32")],
        ref_dtype_bytes=DTYPE_BYTES[str(ref.fsdp_config.get("model_dtype") or "fp32")],
        param_offload=bool(actor.fsdp_config.get("param_offload")),
        optimizer_offload=bool(actor.fsdp_config.get("optimizer_offload")),
        has_ref=bool(kl) and not own_ref,
        checkpointing=bool(model.get("enable_gradient_checkpointing")),
        update_tokens=update[0],
        log_prob_tokens=log_prob[0],
        vllm_fraction=float(rollout.get("gpu_memory_utilization", 0.5)),
        tensor_parallel=tp,
        rows_per_engine=int(config.data.train_batch_size) * int(rollout.n) * tp // world,
        tokens_per_row=row,
        # verl: layered_summon forces level 1, otherwise level 2 (vLLM >= 0.8.5)
        vllm_sleep_level=1 if rollout.get("layered_summon") else 2,
        hf_model_saved="hf_model" in set(actor.checkpoint.save_contents),
        vllm_cuda_graphs=not rollout.get("enforce_eager", False),
        update_key=f"{ACTOR}.{update[1]}",
        log_prob_key=f"actor_rollout_ref.rollout.{log_prob[1]}",
        update_unit=update[2],
        log_prob_unit=log_prob[2],
    )


def machine(config: Any) -> Machine:
    """This machine's first GPU and RAM when it has a GPU, else what the overlay declares."""
    visible = _visible_gpu()
    if visible is not None:
        import psutil

        return Machine(*visible, psutil.virtual_memory().total, "this machine's")
    facts = config.get("hardware_facts") or {}
    gpu_gib, host_gib = facts.get("gpu_memory_gib"), facts.get("host_memory_gib")
    return Machine(
        str(facts.get("gpu", "GPU")),
        None if gpu_gib is None else int(float(gpu_gib) * GIB),
        None if host_gib is None else int(float(host_gib) * GIB),
        "declared in hardware_facts: no GPU here",
    )


def _visible_gpu() -> tuple[str, int] | None:
    """The name and memory of this machine's first GPU (tests stand one in, or none)."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return props.name, int(props.total_memory)


def _cap_fix(key: str, unit: int, now: int, fixed: int, per_token: float, capacity: int) -> str:
    """Lower a micro-batch cap (``unit`` tokens per unit of ``key``) to what fits in 90% of the
    GPU, when something does."""
    room = FILL_LIMIT * capacity - fixed
    units = int(room / per_token) // unit if room > 0 and per_token > 0 else 0
    if unit == 1:
        units = units // 1000 * 1000
    if units <= 0:
        return f"lower {key} ({now // unit} now)"
    return f"lower {key} ({now // unit} now; about {units} fits in {FILL_LIMIT:.0%} of the GPU)"


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
    unit = run.update_unit
    return _cap_fix(run.update_key, unit, run.update_tokens, fixed, per_token, capacity)


def _log_prob_fix(arch: Architecture, run: RunShape, capacity: int) -> str:
    fixed = gpu_phases(arch, replace(run, log_prob_tokens=0), capacity)[1].bytes
    # verl's log-prob caps follow the update's token cap unless set: name the one the user sets
    follows = run.update_unit == run.log_prob_unit == 1 and run.log_prob_tokens == run.update_tokens
    key = run.update_key if follows else f"{run.log_prob_key} (and ref's)"
    per_token = (
        mm.log_prob_activation_bytes(arch, 2000) - mm.log_prob_activation_bytes(arch, 1000)
    ) / 1000
    unit = run.log_prob_unit
    return _cap_fix(key, unit, run.log_prob_tokens, fixed, per_token, capacity)


def _rollout_fix(arch: Architecture, run: RunShape, capacity: int) -> str:
    rollout = gpu_phases(arch, replace(run, vllm_fraction=0.0), capacity)[0]
    kept = rollout.bytes  # everything but vLLM's share
    needed = mm.vllm_weight_bytes(arch, run.tensor_parallel) + mm.VLLM_NON_KV_BYTES
    most = (FILL_LIMIT * capacity - kept) / capacity
    if most * capacity > needed * 1.2:
        return (
            f"lower {UTILIZATION_KEY} ({run.vllm_fraction:g} now; {most:.2f} fills "
            f"{FILL_LIMIT:.0%} of the GPU beside the {_gib(kept)} the actor keeps)"
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


def unplanned(config: Any) -> str | None:
    """Why a GPU run has no plan: its model's shape is unknown (None: it is known, or a CPU run)."""
    if config.actor_rollout_ref.rollout.name != "vllm" or architecture(config) is not None:
        return None
    path = config.actor_rollout_ref.model.path
    return f"{path}: no local config.json and no row in {TABLE}'s _ROWS (add one)"


def plan(config: Any, on: Machine | None = None) -> MemoryPlan | None:
    """The memory plan of a GPU run; None for the CPU path (the HF rollout) or an unknown shape."""
    if config.actor_rollout_ref.rollout.name != "vllm":
        return None
    found = architecture(config)
    if found is None:
        return None
    arch, source = found
    run, gpu = run_shape(config, arch), on or machine(config)
    capacity = gpu.gpu_bytes
    result = MemoryPlan(
        f"{arch.hf_id} (shape from {source})",
        gpu,
        gpu_phases(arch, run, capacity),
        host_phase(arch, run),
    )
    result.problems = _host_problem(result.host, run, gpu)
    if capacity is None:
        result.notes.append("GPU memory unknown: declare hardware_facts.gpu_memory_gib")
        return result
    notes, problems = _vllm_notes(arch, run, capacity)
    result.notes += notes
    over = sorted(
        (phase for phase in result.phases if phase.bytes > capacity), key=lambda p: -p.bytes
    )
    if over:
        problems.insert(0, _gpu_problem(arch, run, gpu, over))
    elif result.peak.bytes > FILL_LIMIT * capacity:
        result.notes.append(
            f"the {result.peak.name} fills {result.peak.bytes / capacity:.0%} of the GPU: it "
            "should fit, with little room for allocator fragmentation or a longer batch"
        )
    result.problems = problems + result.problems
    return result


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: must be a number of GiB > 0")
    return value


def main(argv: list[str] | None = None) -> int:
    from rlvr.config.compose import ConfigError, compose_checked

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", help="an experiment in configs/ (e.g. countdown_qwen3_4b)")
    parser.add_argument("overrides", nargs="*", help="hydra overrides, key=value")
    parser.add_argument("--gpu_gib", type=_positive, help="plan for a GPU of this many GiB")
    parser.add_argument(
        "--host_gib", type=_positive, help="plan for nodes with this much RAM (GiB)"
    )
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
        why = unplanned(config) or "a CPU run (the HF rollout)"
        print(f"memory plan: {args.experiment}: nothing to plan: {why}")
        return 0
    print("\n".join(result.lines()))
    for problem in result.problems:
        print(f"memory plan: {problem}", file=sys.stderr)
    return 2 if result.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The GPU rehearsal's peak-memory check: the peak verl logs against the memory planner's.

What verl logs: ``perf/max_memory_allocated_gb`` is ``torch.cuda.max_memory_allocated()`` read
in the actor worker right after ``update_policy`` (verl 0.6.1, ``update_actor``:
https://github.com/volcengine/verl/blob/v0.6.1/verl/workers/fsdp_workers.py#L884). Nothing in
verl resets the peak on this path (its only ``reset_peak_memory_stats`` calls are in
verl/utils/memory_utils.py, reached through the ``torch_memory`` profiler alone), and the trainer
reduces the ranks' values by their max (``reduce_metrics``, a key with "max" in it:
https://github.com/volcengine/verl/blob/v0.6.1/verl/utils/metric/utils.py#L48). So each step's
value is the highest that torch's count reached on any rank since the worker started: the
rollout, the log-prob passes and the update of every step so far.

What torch counts is not the GPU's physical use. vLLM's sleep mode allocates its weights and KV
cache through torch's caching allocator (a CuMem pool) and, asleep, unmaps their physical
memory without freeing the tensors: torch keeps counting them during the log-prob passes and the
update (https://github.com/vllm-project/vllm/issues/17117,
https://github.com/vllm-project/vllm/issues/33625, about verl). The CUDA context and vLLM's CUDA
graphs are never in the count. The planner's phases (rlvr/planning/memory_plan.py) are physical, so
the check translates them into torch's count from the planner's own parts:

- floor: vLLM's weights and KV cache (its share less the planner's non-KV allowance, as the
  planner sizes the KV cache) plus what the actor keeps resident during the rollout. Every step
  reaches it whatever the response lengths; measured must be at least FLOOR_SHARE of it (the
  floor's one uncertain term is the 2 GiB non-KV allowance, under 5% of a 40-48 GiB share).
- ceiling: the same vLLM bytes plus the largest phase's torch-counted bytes with each micro batch
  at its token cap, the worst case the planner sizes for; measured must be at most
  CEILING_SHARE of it. The planner's formulas are within 1.003-1.029 of plain-PyTorch
  measurements (docs/TRAINING.md, "Measured GPU memory"); the real stack adds vLLM's sampler and
  FSDP/NCCL buffers inside torch's count and the vLLM allowance is a round number: 10% is several
  GiB at these sizes. A run over it means the planner under-estimates (an OOM it did not warn of).
Short responses fill micro batches below their cap, so a healthy run lands anywhere between the
two; which end says how full its micro batches were, not whether the planner is right.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.rehearsal.checks import RehearsalFailure

METRIC = "perf/max_memory_allocated_gb"
FLOOR_SHARE, CEILING_SHARE = 0.90, 1.10
GIB = 2**30
# Planner parts torch never counts: the CUDA context, and vLLM's share and CUDA graphs (vLLM's
# weights and KV cache are added back once, as ``vllm_pool``).
_UNCOUNTED = ("CUDA context", "vLLM")


@dataclass(frozen=True)
class CounterView:
    """The planner's plan, as torch's allocated-bytes counter should see it (bytes)."""

    vllm_pool: int
    resident: int  # the actor's torch-counted bytes during the rollout
    worst: int  # the largest phase's torch-counted bytes, micro batches at their token caps
    worst_phase: str
    physical_peak: int
    physical_phase: str
    gpu: str

    @property
    def floor(self) -> int:
        return self.vllm_pool + self.resident

    @property
    def ceiling(self) -> int:
        return self.vllm_pool + self.worst


def counter_view(config: Any, on: Any = None) -> CounterView:
    """The planner's phases for ``config`` on ``on`` (a memory_plan.Machine; default this machine's
    GPU, else the overlay's declared one), in torch's count."""
    from rlvr.planning import memory_model as mm
    from rlvr.planning import memory_plan

    plan = memory_plan.plan(config, on)
    if plan is None or not plan.machine.gpu_bytes:
        raise RehearsalFailure("peak memory: the planner has no plan (unknown model or GPU size)")
    fraction = float(config.actor_rollout_ref.rollout.get("gpu_memory_utilization", 0.5))
    pool = max(int(fraction * plan.machine.gpu_bytes) - mm.VLLM_NON_KV_BYTES, 0)
    counted = [
        sum(part.bytes for part in phase.parts if not part.name.startswith(_UNCOUNTED))
        for phase in plan.phases
    ]
    worst = max(range(len(counted)), key=counted.__getitem__)
    return CounterView(
        vllm_pool=pool,
        resident=counted[0],  # gpu_phases: the rollout first
        worst=counted[worst],
        worst_phase=plan.phases[worst].name,
        physical_peak=plan.peak.bytes,
        physical_phase=plan.peak.name,
        gpu=f"{plan.machine.gpu} ({plan.machine.source})",
    )


def tolerance_line(view: CounterView) -> str:
    """The bounds, as the dry run lists them."""
    return (
        f"{METRIC} between {FLOOR_SHARE:.2f} x {view.floor / GIB:.1f} GiB (vLLM's weights + KV "
        f"cache {view.vllm_pool / GIB:.1f}, counted while it sleeps, + the actor's resident "
        f"{view.resident / GIB:.1f}) and {CEILING_SHARE:.2f} x {view.ceiling / GIB:.1f} GiB "
        f"(vLLM's + the {view.worst_phase} at its token caps, {view.worst / GIB:.1f}), "
        f"on {view.gpu}"
    )


def peak_memory(metrics: Path, config: Any, on: Any = None) -> str:
    """The peak verl logged over every trained step in ``metrics`` (verl's file logger) lies
    between the floor and the ceiling of ``counter_view``; a step without it fails."""
    from rlvr.report.metrics_log import read_steps

    if not metrics.is_file():
        raise RehearsalFailure(f"peak memory: {metrics}: verl's file logger wrote nothing")
    trained = [r for r in read_steps(metrics) if "actor/entropy" in r.metrics]
    if not trained:
        raise RehearsalFailure(f"peak memory: {metrics}: no trained step logged")
    missing = [r.step for r in trained if METRIC not in r.metrics]
    if missing:
        raise RehearsalFailure(
            f"peak memory: {METRIC} missing at steps {missing} of {metrics.name} (verl logs it "
            "after each actor update): nothing to compare with the planner"
        )
    measured = max(r.metrics[METRIC] for r in trained) * GIB
    view = counter_view(config, on)
    ratio = measured / view.ceiling
    steps = [r.step for r in trained]
    physical = f"{view.physical_peak / GIB:.1f} GiB, {view.physical_phase}"
    line = (
        f"measured {measured / GIB:.1f} GiB ({METRIC}, max of steps {steps}); planned "
        f"{view.floor / GIB:.1f}-{view.ceiling / GIB:.1f} GiB in torch's count on {view.gpu} "
        f"(ratio to the ceiling {ratio:.3f}; physical peak {physical})"
    )
    if measured > CEILING_SHARE * view.ceiling:
        raise RehearsalFailure(
            f"peak memory: {line}: over {CEILING_SHARE:.2f} x the planned ceiling; the memory "
            "planner under-estimates this run"
        )
    if measured < FLOOR_SHARE * view.floor:
        raise RehearsalFailure(
            f"peak memory: {line}: under {FLOOR_SHARE:.2f} x the planned floor; vLLM's share or "
            "the actor's resident state is not what the planner assumes"
        )
    return line

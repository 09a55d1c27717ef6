"""Throughput against published runs: "how long is normal?" for the report's Reference section.

verl logs ``perf/throughput`` every step: the batch's tokens (prompts and responses) divided by
the step's seconds and the number of GPUs (``metric_utils.compute_throughout_metrics``). The run's
figure is the median over its training steps after the first (the first carries one-time
costs: the first weight sync into vLLM, ``torch.compile`` of verl's entropy, allocator warm-up;
the published log's step 1 ran at 69% of its median). It is set against the published
entry (``reference_bands.yaml``, ``throughput``) of the same model (last path component, as for
accuracies) on the same GPU kind (``run_plan.json``'s ``gpu``: the kind Ray detected, else the
hardware overlay's ``hardware_facts.gpu``): "on track" at or above ``SLOWER_BELOW`` of the
published value, else "slower than published", naming the settings in the run's config that
most often explain it. A run of a recipe without an entry (or on CPU) gets no line.
Information, never an alarm: a published run's response lengths and GPU count differ from the
recipe's, so the band is wide (docs/REFERENCE_BANDS.md).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping
from typing import Any

from rlvr.report.bands import ReferenceBands, ThroughputEntry, same_model
from rlvr.report.metrics_log import step_ranges
from rlvr.report.records import RunRecords

THROUGHPUT_KEY = "perf/throughput"
#: "Slower than published" below half the published tokens/s/GPU: responses of another length,
#: another GPU count or another verl/vLLM version move the figure by amounts no published source
#: measures for these recipes, so only a gap beyond a factor of 2 is called out.
SLOWER_BELOW = 0.5
#: Below this share of the GPU, vLLM's KV cache holds few sequences and the rollout runs in
#: many small waves (verl's perf-tuning guide recommends 0.5-0.7 when nothing is offloaded).
LOW_GPU_MEMORY_UTILIZATION = 0.5
_GPU_KIND = re.compile(r"\b([A-Z]\d{2,3}[A-Z]?)\b")
ACCELERATOR = "accelerator_type:"  # ray.util.accelerators' resource prefix


def run_settings(config: Any) -> dict[str, bool | float]:
    """The composed config's values of ``RunSettings``' keys (recorded in run_plan.json)."""
    ref = config.actor_rollout_ref
    fsdp = ref.actor.fsdp_config
    return {
        "enforce_eager": bool(ref.rollout.get("enforce_eager", False)),
        "param_offload": bool(fsdp.get("param_offload", False)),
        "optimizer_offload": bool(fsdp.get("optimizer_offload", False)),
        "gpu_memory_utilization": float(ref.rollout.gpu_memory_utilization),
        "use_dynamic_bsz": bool(ref.actor.get("use_dynamic_bsz", False)),
        "use_remove_padding": bool(ref.model.get("use_remove_padding", False)),
    }


def detected_gpu() -> str | None:
    """The GPU kind Ray found on the cluster (its ``accelerator_type:<kind>`` resource, which
    Ray sets from NVML's device name: ``H100`` for "NVIDIA H100 80GB HBM3"), when Ray is up in
    this process and found exactly one kind; else None. ``hardware/h100x1.yaml`` also serves an
    A100 80GB, so the overlay's declared GPU alone can name the wrong one."""
    import ray

    if not ray.is_initialized():
        return None
    resources = ray.cluster_resources()
    kinds = {key.removeprefix(ACCELERATOR) for key in resources if key.startswith(ACCELERATOR)}
    return kinds.pop() if len(kinds) == 1 else None


def gpu_kind(name: str | None) -> str | None:
    """``H100`` from ``H100 80GB`` or ``NVIDIA H100 80GB HBM3``; None when none is named."""
    match = _GPU_KIND.search(name.upper()) if name else None
    return match[1] if match else None


def suspects(settings: Mapping[str, Any]) -> list[str]:
    """The run's settings that most often explain a slow run, as config overrides."""
    found = []
    if settings.get("enforce_eager") is True:
        found.append("rollout.enforce_eager=true (vLLM without CUDA graphs)")
    for key in ("param_offload", "optimizer_offload"):
        if settings.get(key) is True:
            found.append(f"actor.fsdp_config.{key}=true")
    share = settings.get("gpu_memory_utilization")
    if isinstance(share, int | float) and share < LOW_GPU_MEMORY_UTILIZATION:
        found.append(f"rollout.gpu_memory_utilization={share:g} (< {LOW_GPU_MEMORY_UTILIZATION})")
    if settings.get("use_dynamic_bsz") is False:
        found.append("actor.use_dynamic_bsz=false")
    if settings.get("use_remove_padding") is False:
        found.append("model.use_remove_padding=false")
    return found


def matching_entry(bands: ReferenceBands, model: str, gpu: str | None) -> ThroughputEntry | None:
    kind = gpu_kind(gpu)
    for entry in bands.throughput:
        if kind is not None and entry.gpu == kind and same_model(entry.model, model):
            return entry
    return None


def throughput_lines(records: RunRecords, bands: ReferenceBands) -> list[str]:
    """The Reference section's throughput line, or none (no entry for this model and GPU, or
    no ``perf/throughput`` logged)."""
    plan = records.plan
    if plan is None or plan.model is None:
        return []
    entry = matching_entry(bands, plan.model, plan.gpu)
    series = records.finite(THROUGHPUT_KEY)
    if entry is None or not series:
        return []
    label = (
        f"[{entry.id}: {entry.task} on {entry.gpus}x {entry.gpu}, responses "
        f"{entry.response_length}; {entry.source.url}]"
    )
    training = [(step, value) for step, value in series if step > 0]
    after_first = training[1:]
    if not after_first:
        return [
            f"throughput: no verdict yet: only the first training step (warm-up) logged "
            f"{THROUGHPUT_KEY} {label}"
        ]
    median = statistics.median(value for _, value in after_first)
    ratio = median / entry.tokens_per_s_per_gpu
    steps = step_ranges([step for step, _ in after_first])
    measured = (
        f"median {median:,.0f} tokens/s/GPU over steps {steps} ({THROUGHPUT_KEY}; the first "
        f"step left out as warm-up) vs {entry.tokens_per_s_per_gpu:,.0f} published, {ratio:.2f}x"
    )
    if ratio >= SLOWER_BELOW:
        return [f"throughput on track: {measured} {label}"]
    found = suspects(plan.settings or {})
    if plan.settings is None:
        why = "run_plan.json records no settings (written before it did?) to name a cause"
    elif found:
        why = f"settings here that often explain it: {', '.join(found)}"
    else:
        why = (
            "none of enforce_eager, offload, gpu_memory_utilization < 0.5, no dynamic batching, "
            "no remove-padding is set here: compare timing_s/gen with timing_s/update_actor"
        )
    return [f"throughput slower than published: {measured}; {why} {label}"]

"""What a CPU rehearsal of a GPU experiment must show, one function per claim.

Each check returns a one-line finding and raises ``RehearsalFailure`` with the reason when the
claim does not hold. They read only files the run wrote: the setup hook's device trace
(``RLVR_TRACE_DIR``), the checkpoint folder, verl's metrics.jsonl and the offline wandb run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any


class RehearsalFailure(Exception):
    """A rehearsal claim that does not hold; the message says which and why."""


def _trace_records(trace_dir: Path) -> dict[int, list[dict[str, Any]]]:
    by_pid: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(trace_dir.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            by_pid[record["pid"]].append(record)
    return by_pid


def traced_processes(out: Path) -> list[tuple[int, float]]:
    """(pid, first seen) of every process that ran the setup hook in any launch under ``out``:
    the Ray workers, whose command lines Ray rewrites, so no marker finds them."""
    return [
        (pid, min(r["time"] for r in records))
        for trace_dir in sorted(out.rglob("trace_*"))
        for pid, records in _trace_records(trace_dir).items()
    ]


def devices(trace_dir: Path, world_size: int, python: str) -> str:
    """Every rank: its own CUDA_VISIBLE_DEVICES set before torch was first imported, then blanked
    so torch sees no GPU (the rehearsal runs on CPU, on a GPU node too), torch not imported by the
    setup hook, and the project's interpreter (not a node-specific uv path)."""
    ranks: dict[str, dict[str, Any]] = {}
    problems = []
    for pid, records in _trace_records(trace_dir).items():
        hook = next((r for r in records if r["event"] == "hook"), None)
        first_torch = next((r for r in records if r["event"] == "torch_imported"), None)
        if hook is not None and hook["torch_loaded"]:
            problems.append(f"pid {pid}: torch was imported before the setup hook ran")
        if hook is not None and hook["executable"] != python:
            problems.append(f"pid {pid}: runs {hook['executable']}, not {python}")
        if first_torch is None or first_torch["rank"] is None:
            continue  # the TaskRunner and helpers: no rank, no device of their own
        device = first_torch["cuda_visible_devices"]
        if not device or "," in device:
            problems.append(f"rank {first_torch['rank']}: CUDA_VISIBLE_DEVICES={device!r} at torch")
        hidden = [r for r in records if r["event"] == "gpus_hidden"]
        if not hidden or hidden[0]["cuda_visible_devices"] != "":
            problems.append(f"rank {first_torch['rank']}: GPU {device!r} not hidden from torch")
        ranks[first_torch["rank"]] = first_torch
    if sorted(ranks, key=int) != [str(r) for r in range(world_size)]:
        problems.append(f"ranks traced {sorted(ranks, key=int)}, expected 0..{world_size - 1}")
    per_node: dict[str, list[str]] = defaultdict(list)
    for record in ranks.values():
        per_node[record["raylet_pid"]].append(record["cuda_visible_devices"])
    for node, seen in per_node.items():
        if len(set(seen)) != len(seen):
            problems.append(f"node (raylet {node}): ranks share a device: {sorted(map(str, seen))}")
    if problems:
        raise RehearsalFailure("; ".join(problems[:6]))
    layout = ", ".join(f"{len(v)} on node {i + 1}" for i, v in enumerate(per_node.values()))
    return (
        f"{len(ranks)} ranks, each its own CUDA_VISIBLE_DEVICES before torch, then hidden "
        f"({layout})"
    )


def shards(actor_dir: Path, world_size: int, contents: list[str]) -> str:
    """Every rank wrote its model, optimizer and extra-state shard."""
    kinds = {"model": "model", "optimizer": "optim", "extra": "extra_state"}
    missing = [
        f"{prefix}_world_size_{world_size}_rank_{rank}.pt"
        for key, prefix in kinds.items()
        if key in contents
        for rank in range(world_size)
        if not (actor_dir / f"{prefix}_world_size_{world_size}_rank_{rank}.pt").is_file()
    ]
    if missing:
        raise RehearsalFailure(f"{actor_dir}: missing shards {missing[:4]} ({len(missing)} in all)")
    return f"{world_size} ranks x {len([k for k in kinds if k in contents])} shard files"


BUDGET_TOLERANCE = 0.10


def _tensor_bytes(obj: Any, seen: set[int]) -> int:
    """Bytes of the tensor storages in ``obj`` (DTensors by their local shard), each storage
    once, as ``torch.save`` writes them (tied weights share one)."""
    import torch
    from torch.distributed.tensor import DTensor

    if isinstance(obj, DTensor):
        obj = obj.to_local()
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        if storage.data_ptr() in seen:
            return 0
        seen.add(storage.data_ptr())
        return int(storage.nbytes())
    if isinstance(obj, dict):
        return sum(_tensor_bytes(value, seen) for value in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(value, seen) for value in obj)
    return 0


def rank_state_bytes(actor_dir: Path) -> dict[int, int]:
    """The tensor bytes each rank's model and optimizer shards hold, by rank."""
    import torch

    held: dict[int, int] = {}
    for kind in ("model", "optim"):
        for path in sorted(actor_dir.glob(f"{kind}_world_size_*_rank_*.pt")):
            rank = int(path.stem.rsplit("_", 1)[1])
            loaded = torch.load(path, map_location="cpu", weights_only=False)
            held[rank] = held.get(rank, 0) + _tensor_bytes(loaded, set())
    return held


def written_bytes(actor_dir: Path) -> int:
    """The tensor bytes one checkpoint holds: every rank's model and optimizer shards, and the
    weights under huggingface/ and lora_adapter/. Pickle and safetensors headers, extra state,
    tokenizer and config files are left out, as the budget formula leaves them out (on the tiny
    model they would be a third of the files; on a 4B model, noise)."""
    from rlvr.common.files import read_safetensors_header

    total = sum(rank_state_bytes(actor_dir).values())
    for folder in ("huggingface", "lora_adapter"):
        for path in sorted((actor_dir / folder).glob("*.safetensors")):
            header = read_safetensors_header(path)
            total += sum(
                end - start
                for name, tensor in header.items()
                if name != "__metadata__"
                for start, end in [tensor["data_offsets"]]
            )
    return total


def checkpoint_bytes(actor_dir: Path, config: Any) -> str:
    """The bytes one checkpoint wrote match pre-flight's budget for the same config and model
    (``rlvr.planning.checkpoint_budget``, HSDP replicas included) within 10%."""
    from rlvr.planning import checkpoint_budget as budget

    size = budget.model_size(config)
    if size is None:
        raise RehearsalFailure("checkpoint bytes: the model's size is unknown to the budget")
    expected = budget.checkpoint_bytes(config, size)[0] + budget.merged_bytes(config, size)
    measured = written_bytes(actor_dir)
    ratio = measured / expected if expected else float("inf")
    line = (
        f"{measured:,} bytes written, {expected:,} budgeted (x{budget.replicas(config)} "
        f"replicas), ratio {ratio:.3f}"
    )
    return _within_tolerance(ratio, line, "checkpoint bytes", "pre-flight's disk budget is wrong")


def _within_tolerance(ratio: float, line: str, step: str, blame: str) -> str:
    """``line`` when measured / expected is within 10% of 1, else the step's failure."""
    if abs(ratio - 1) > BUDGET_TOLERANCE:
        raise RehearsalFailure(f"{step}: {line}; {blame}")
    return line


def actor_state_per_rank(actor_dir: Path, config: Any, world_size: int) -> str:
    """Each rank's actor state, the tensors its model and optimizer shards hold, matches the
    memory planner's per-GPU parameters + AdamW (rlvr/planning/memory_model.py) within 10%: the
    part of its estimate that is the same on CPU (sharding, HSDP replicas, dtype, LoRA)."""
    from rlvr.planning import memory_model
    from rlvr.planning.memory_plan import architecture, run_shape

    found = architecture(config)
    if found is None:
        raise RehearsalFailure("actor state: the model's shape is unknown to the planner")
    arch = found[0]
    run = run_shape(config, arch)
    planned = memory_model.actor_params_bytes(arch, run) + memory_model.optimizer_bytes(arch, run)
    held = rank_state_bytes(actor_dir)
    if sorted(held) != list(range(world_size)):
        raise RehearsalFailure(
            f"actor state: shards of ranks {sorted(held)}, not 0..{world_size - 1}"
        )
    measured = list(held.values())
    ratio = max(measured) / planned
    line = (
        f"largest rank holds {max(measured):,} bytes of parameters + AdamW, the planner "
        f"{planned:,} a GPU (sharded over {run.shard}), ratio {ratio:.3f}"
    )
    return _within_tolerance(ratio, line, "actor state", "the memory planner's sharding is wrong")


def loads_strictly(hf_dir: Path, lora_dir: Path | None) -> str:
    """``actor/huggingface`` loads with zero missing/unexpected/mismatched keys; for LoRA it equals
    base + adapter merged by PEFT."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.train.lora_merge import MergeError, load_strictly, recorded_base

    try:
        model = load_strictly(hf_dir)
    except (OSError, ValueError) as exc:
        raise RehearsalFailure(f"{hf_dir}: does not load: {exc}") from exc
    except MergeError as exc:
        raise RehearsalFailure(str(exc)) from exc
    if lora_dir is None:
        return "loads with 0 missing, 0 unexpected, 0 mismatched keys"
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(recorded_base(lora_dir), dtype=model.dtype)
    merged = PeftModel.from_pretrained(base, lora_dir).merge_and_unload().state_dict()
    ours = model.state_dict()
    if merged.keys() != ours.keys():
        raise RehearsalFailure(f"{hf_dir}: keys differ from base + adapter")
    diff = max((merged[k].float() - ours[k].float()).abs().max().item() for k in ours)
    if diff > 1e-5 or not torch.isfinite(torch.tensor(diff)):
        raise RehearsalFailure(f"{hf_dir}: differs from base + adapter by {diff:.2e}")
    return f"loads strictly and equals base + lora_adapter (max |diff| {diff:.1e})"


def gradient_scale(config: Any, model_dir: Path, world_sizes: list[int]) -> str:
    """Each update's gradient is whole: the experiment's batching passes the rules of
    ``rlvr.config.batching``, and verl's own actor update, with that batching at each world size,
    gives the gradient norm computed outside verl (``rlvr.rehearsal.grad_scale``)."""
    from rlvr.config.batching import batching
    from rlvr.rehearsal import grad_scale

    found = []
    for world in dict.fromkeys(world_sizes):
        problems = batching(config, world).problems()
        if problems and batching(config, world).mini_rows_per_rank <= 0:
            raise RehearsalFailure(f"world size {world}: {problems[0]}")
        result = grad_scale.check(config, model_dir, world)
        if problems or not result.ok:
            rule = problems[0] if problems else "an update's loss-scale factors do not sum to 1"
            raise RehearsalFailure(f"world size {world}: {rule}; measured: {result.line()}")
        found.append(f"world {world}: {result.line()}")
    return "; ".join(found)


# Step 1 of two topologies: the same rows on every rank (the rollout's seed is the rank's), so
# these must agree; only the gradient's reduction order differs (fp32).
SAME_ROLLOUTS = ("critic/score/mean", "response_length/mean")
SAME_UPDATE = ("actor/pg_loss", "actor/grad_norm")
TOPOLOGY_RTOL, TOPOLOGY_ATOL = 1e-3, 1e-6


def same_step_one(run: Path, reference: Path) -> str:
    """Step 1 of ``run`` (its metrics.jsonl) and of ``reference``, the same experiment, data and
    seed at the same world size on another topology: the same rollouts, and the same loss and
    gradient norm. A gradient reduced or scaled per node would differ here."""
    from rlvr.report.metrics_log import read_steps

    steps = []
    for path in (run, reference):
        first = [r.metrics for r in read_steps(path) if r.step == 1]
        if not first:
            raise RehearsalFailure(f"{path}: no step 1 logged")
        steps.append(first[0])
    ours, theirs = steps
    for keys, what in ((SAME_ROLLOUTS, "rollouts"), (SAME_UPDATE, "update")):
        for key in keys:
            a, b = ours.get(key), theirs.get(key)
            if a is None or b is None:
                raise RehearsalFailure(f"step 1: {key} missing ({run} or {reference})")
            if abs(a - b) > TOPOLOGY_ATOL + TOPOLOGY_RTOL * abs(b):
                raise RehearsalFailure(
                    f"step 1 {what} differ between topologies: {key} {a:.6g} vs {b:.6g}"
                )
    shown = ", ".join(f"{k.split('/')[-1]} {ours[k]:.4g}" for k in SAME_UPDATE)
    return f"step 1 agrees with one node at the same world size ({shown})"


def logged_steps(metrics: Path, expected: list[int], start: int = 0) -> str:
    """verl's ``file`` logger (the config's ``paths.metrics``) holds training metrics for exactly
    the ``expected`` steps past byte ``start``: a resumed launch appends from where the last one
    ended, and must not train the earlier steps again."""
    from rlvr.report.metrics_log import parse_steps

    try:
        text = metrics.read_bytes()[start:].decode("utf-8")
    except FileNotFoundError:
        raise RehearsalFailure(f"{metrics}: verl's file logger wrote nothing") from None
    records = [r for r in parse_steps(text, str(metrics)) if "actor/entropy" in r.metrics]
    trained = [r.step for r in records]
    if trained != expected:
        raise RehearsalFailure(f"{metrics}: trained steps {trained}, expected {expected}")
    scores = [r.metrics.get("critic/score/mean") for r in records]
    return f"{metrics.name}: steps {trained} (critic/score/mean {scores})"


def wandb_run(wandb_dir: Path, known: set[Path], table: str | None = "val/generations") -> str:
    """Exactly one new offline wandb run, whose run file wandb wrote (not empty), and the
    validation generations ``table`` (verl logs it to wandb alone, as a table media file, when
    ``trainer.log_val_generations`` > 0)."""
    # Enough for the steps: verl's Tracking.log hands each step's metrics to every logger in one
    # call, so ``logged_steps`` on metrics.jsonl checks what wandb was given; this shows wandb ran.
    runs = set(wandb_dir.glob("offline-run-*/run-*.wandb")) - known
    if len(runs) != 1:
        raise RehearsalFailure(f"{len(runs)} new wandb runs under {wandb_dir}, expected 1")
    (run,) = runs
    if run.stat().st_size == 0:
        raise RehearsalFailure(f"{run.parent.name}: its run file is empty")
    # wandb saves a logged Table as files/media/table/<key>_<step>_<hash>.table.json.
    if table is not None and not any(run.parent.glob(f"files/media/table/{table}_*.table.json")):
        raise RehearsalFailure(f"{run.parent.name}: no {table} table (trainer.log_val_generations)")
    logged = f", {table} table" if table is not None else ""
    return f"{run.parent.name}: run file of {run.stat().st_size:,} bytes{logged}"

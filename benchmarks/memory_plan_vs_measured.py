"""The memory planner's estimates against the GPU measurements they were fitted to, or against
held-out ones.

Usage: uv run python benchmarks/memory_plan_vs_measured.py [--results RESULTS.json]

Without --results: the H200 measurements the planner's coefficients were fitted to
(results/gpu_memory_h200.json). With another file (results/gpu_memory_h100_heldout.json: an H100,
other token counts, LoRA r8), each row is labelled "held out" or, where the same model, pass and
token count was among the fitted H200 points, "re-measured" (a fitted point measured again).

For each base model and micro-batch size measured by benchmarks/gpu_memory_calibration.py, the
planner (rlvr/planning/memory_model.py) estimates the same quantity at world size 1 (full
fine-tuning, fp32 actor, no offload, no vLLM or reference in the process): the peak of a log-prob
pass and of an update, each on top of the static parameters, gradients and AdamW state, as
PyTorch's peak memory_allocated counts it (so the planner's CUDA-context allowance is left out).
Prints a Markdown table, measured and estimated GiB and their ratio, for docs/TRAINING.md.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.models.architectures import ARCHITECTURES, Architecture, lora_parameters_per_rank
from rlvr.planning import memory_model as mm
from rlvr.planning.memory_model import GIB, RunShape

RESULTS = Path(__file__).parent / "results" / "gpu_memory_h200.json"
HELD_OUT = Path(__file__).parent / "results" / "gpu_memory_h100_heldout.json"


@dataclass(frozen=True)
class Row:
    model: str
    pass_name: str  # "log-prob", "update, checkpointing on/off"
    tokens: int
    measured: int  # peak memory_allocated, bytes
    estimated: int

    @property
    def ratio(self) -> float:
        return self.estimated / self.measured


def one_gpu(tokens: int, checkpointing: bool, lora_parameters: int = 0) -> RunShape:
    """The calibration's setting in the planner's terms."""
    return RunShape(
        gpus_per_node=1, shard=1, lora_parameters=lora_parameters, actor_dtype_bytes=4,
        ref_dtype_bytes=4, param_offload=False, optimizer_offload=False, has_ref=False,
        checkpointing=checkpointing, update_tokens=tokens,
        log_prob_tokens=tokens, vllm_fraction=0.0, tensor_parallel=1, rows_per_engine=0,
        tokens_per_row=0, vllm_sleep_level=1, hf_model_saved=False,
    )  # fmt: skip


def _static(arch: Architecture, run: RunShape) -> int:
    params = mm.actor_params_bytes(arch, run)
    return params + mm.optimizer_bytes(arch, run) + mm.gradient_bytes(arch, run)


def estimate(arch: Architecture, run: RunShape, update: bool) -> int:
    """Peak allocated bytes the planner expects for the calibration's measurement."""
    extra = mm.gathered_bytes(arch)
    if update:
        extra += mm.update_activation_bytes(arch, run.update_tokens, run.checkpointing)
    else:
        extra += mm.log_prob_activation_bytes(arch, run.log_prob_tokens)
    return _static(arch, run) + extra


def comparisons(results: dict[str, Any]) -> list[Row]:
    rows = []
    for name, measured in results["models"].items():
        arch = ARCHITECTURES[name]
        for entry in measured.get("log_prob", []):
            if entry.get("status") == "ok":
                run = one_gpu(entry["tokens"], True)
                peak = entry["peak_allocated_bytes"]
                rows.append(
                    Row(name, "log-prob", entry["tokens"], peak, estimate(arch, run, False))
                )
        for entry in measured.get("update", []):
            if entry.get("status") == "ok":
                on = bool(entry["gradient_checkpointing"])
                run = one_gpu(entry["tokens"], on)
                label = f"update, checkpointing {'on' if on else 'off'}"
                peak = entry["peak_allocated_bytes"]
                rows.append(Row(name, label, entry["tokens"], peak, estimate(arch, run, True)))
    return rows + _lora_rows(results.get("lora") or {})


def _lora_rows(lora: dict[str, Any]) -> list[Row]:
    """The LoRA measurement: a frozen fp32 base, adapters trained (rank r on all linear layers)."""
    if not lora or lora.get("static", {}).get("status") != "ok":
        return []
    arch = ARCHITECTURES[lora["model"]]
    adapters = lora["r"] * lora_parameters_per_rank(arch)
    rows = []
    for entry in lora.get("update", []):
        if entry.get("status") == "ok":
            run = one_gpu(entry["tokens"], bool(entry["gradient_checkpointing"]), adapters)
            label = f"update, LoRA r{lora['r']}, checkpointing on"
            peak = entry["peak_allocated_bytes"]
            rows.append(Row(lora["model"], label, entry["tokens"], peak, estimate(arch, run, True)))
    return rows


def labels(rows: list[Row], fitted: list[Row] | None) -> list[str]:
    """Each row's set: "fitted" (no other file given), else "re-measured" where the fitted file
    holds the same model, pass and token count, "held out" otherwise."""
    if fitted is None:
        return ["fitted"] * len(rows)
    seen = {(row.model, row.pass_name, row.tokens) for row in fitted}
    return [
        "re-measured" if (row.model, row.pass_name, row.tokens) in seen else "held out"
        for row in rows
    ]


def markdown(rows: list[Row], sets: list[str]) -> str:
    lines = [
        "| model | pass | T | set | measured GiB | planner GiB | planner / measured |",
        "|---|---|---:|---|---:|---:|---:|",
    ]
    for row, label in zip(rows, sets, strict=True):
        lines.append(
            f"| {ARCHITECTURES[row.model].hf_id.split('/')[1]} | {row.pass_name} | {row.tokens} | "
            f"{label} | {row.measured / GIB:.1f} | {row.estimated / GIB:.1f} | {row.ratio:.3f} |"
        )
    return "\n".join(lines)


def summary(rows: list[Row], sets: list[str]) -> list[str]:
    """One line per set: how many rows, and the planner / measured range."""
    lines = []
    for label in dict.fromkeys(sets):
        ratios = [row.ratio for row, s in zip(rows, sets, strict=True) if s == label]
        lines.append(
            f"{len(ratios)} {label}: planner / measured from {min(ratios):.3f} to {max(ratios):.3f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="calibration JSON to read")
    args = parser.parse_args(argv)
    try:
        rows = comparisons(json.loads(args.results.read_text()))
    except (OSError, ValueError, KeyError) as exc:
        parser.error(f"--results {args.results}: not a calibration file ({exc!r})")
    fitted = None
    if args.results.resolve() != RESULTS.resolve():
        fitted = comparisons(json.loads(RESULTS.read_text()))
    sets = labels(rows, fitted)
    print(markdown(rows, sets))
    print("", *summary(rows, sets), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

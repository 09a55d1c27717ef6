"""GPU memory of verl's FSDP actor, measured on the recipes' base models with random weights.

Usage, on a GPU machine (torch, transformers, peft; no verl, vLLM or network needed):
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONPATH=. \
        python3 benchmarks/gpu_memory_calibration.py --out gpu_memory.json
(verl's FSDP worker turns expandable segments on for training: fsdp_workers.py)
and here, as a CPU dry run of the same code path on toy-sized models, without figures:
    uv run python benchmarks/gpu_memory_calibration.py --dry_run --out /tmp/gpu_memory.json

Why: issue 29's pre-flight memory planner estimates the actor's per-GPU peak from a model's
shape; these are the figures it is checked against. Each base model in
rlvr/models/architectures.py is built on the GPU in fp32 with random weights and wrapped as
verl 0.6.1's actor is (FSDP2 at world size 1, bf16 compute; see gpu_memory_probe.py), then:
  static     parameters + gradients + AdamW state after an optimizer step (memory_allocated);
  log_prob   the peak above that during a no-grad log-prob + entropy pass of T tokens;
  update     the peak above that during forward + backward of one packed micro batch of T
             tokens, with gradient checkpointing on and off (an OOM is recorded, not raised);
  lora       the same static and update for one model with PEFT LoRA (configs/adapter/lora32.yaml).
The JSON is rewritten after every measurement, and no new measurement starts after --budget_s.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gpu_memory_probe as probe  # beside this script, which python puts on sys.path
import torch

from rlvr.models.architectures import (
    ARCHITECTURES,
    Architecture,
    miniature,
    parameter_count,
    transformers_config,
)

# 24000 is ppo_max_token_len_per_gpu in configs/hardware/a100x8.yaml.
DEFAULT_TOKENS = [4096, 8192, 16384, 24000]
DRY_RUN_TOKENS = [32, 64]
GIB = 2**30


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to (re)write")
    parser.add_argument(
        "--models", nargs="+", choices=sorted(ARCHITECTURES), default=list(ARCHITECTURES),
        help="base models to measure (default: all, in table order)",
    )  # fmt: skip
    parser.add_argument(
        "--tokens", nargs="+", type=int, default=None,
        help=f"micro-batch token counts (default {DEFAULT_TOKENS}; dry run {DRY_RUN_TOKENS})",
    )  # fmt: skip
    parser.add_argument(
        "--lora_model", default="qwen3-4b-instruct-2507", choices=sorted(ARCHITECTURES),
        help="model measured with LoRA (it must also be in --models)",
    )  # fmt: skip
    parser.add_argument("--lora_rank", type=int, default=32, help="0 skips LoRA (lora32.yaml: 32)")
    parser.add_argument("--lora_alpha", type=int, default=32, help="LoRA alpha (lora32.yaml: 32)")
    parser.add_argument(
        "--lora_tokens", type=int, default=None,
        help="micro-batch tokens of the LoRA update (default: the largest of --tokens)",
    )  # fmt: skip
    parser.add_argument(
        "--budget_s", type=float, default=360.0,
        help="start no new measurement after this many seconds (what is done is kept)",
    )  # fmt: skip
    parser.add_argument(
        "--dry_run", action="store_true",
        help="CPU, toy-sized models (2 layers): exercises every phase, records no memory",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.tokens = args.tokens or (DRY_RUN_TOKENS if args.dry_run else DEFAULT_TOKENS)
    args.lora_tokens = args.lora_tokens or max(args.tokens)
    return args


def environment(device: torch.device) -> dict[str, Any]:
    import transformers

    try:
        import peft

        peft_version = peft.__version__
    except ImportError:
        peft_version = None
    cuda = device.type == "cuda"
    return {
        "device": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
        "total_memory_bytes": torch.cuda.get_device_properties(device).total_memory
        if cuda
        else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft_version,
        "python": platform.python_version(),
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    }


def setup(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "world_size": 1,
        "wrap": "FSDP2 fully_shard per decoder layer + root; bf16 params, fp32 reduce",
        "actor_dtype": "float32",
        "compute": "bfloat16 autocast",
        "attn_implementation": "sdpa (one row of T tokens, causal, no padding)",
        "optimizer": "torch.optim.AdamW (foreach), grad clip 1.0",
        "log_probs": "chunked fp32 log-sum-exp, gradient written into the bf16 logits in place "
        "(flash-attn cross_entropy_loss's memory profile)",
        "entropy": "on the log_prob pass only (verl: actor old-log-prob; entropy_coeff 0), chunked",
        "chunk_rows": probe.CHUNK_ROWS,
        "tokens": args.tokens,
        "dry_run": args.dry_run,
        "weights": "random (no download); figures do not depend on values",
    }


class Run:
    """The results document, the wall-clock budget, and the JSON rewritten after each step."""

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args, self.device = args, device
        self.started = time.monotonic()
        self.cut_short = False  # a measurement was skipped for the budget
        self.doc: dict[str, Any] = {
            "schema": 1,
            "command": " ".join(["python3", "benchmarks/gpu_memory_calibration.py", *sys.argv[1:]]),
            "environment": environment(device),
            "setup": setup(args),
            "models": {},
            "complete": False,
        }

    def over_budget(self) -> bool:
        return time.monotonic() - self.started > self.args.budget_s

    def measure(self, label: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if self.over_budget():
            self.cut_short = True
            result: dict[str, Any] = {"status": "skipped", "reason": "budget"}
        else:
            result = probe.timed(fn)
        print(f"[{time.monotonic() - self.started:6.1f}s] {label}: {_brief(result)}", flush=True)
        return result

    def save(self) -> None:
        self.doc["elapsed_s"] = round(time.monotonic() - self.started, 1)
        for entry in self.doc["models"].values():
            entry["per_token"] = per_token_fits(entry)
        tmp = self.args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1) + "\n")
        tmp.replace(self.args.out)


def _brief(result: dict[str, Any]) -> str:
    """One log line: byte counts in GiB."""
    shown = [
        f"{k.removesuffix('_bytes')}={_gib(v)}GiB" if k.endswith("_bytes") else f"{k}={v}"
        for k, v in result.items()
        if k != "status"
    ]
    return " ".join([result["status"], *shown])


def _arch(name: str, dry_run: bool) -> Architecture:
    return miniature(ARCHITECTURES[name]) if dry_run else ARCHITECTURES[name]


def build(
    run: Run, arch: Architecture, lora: dict[str, Any] | None, mesh: Any
) -> tuple[dict[str, Any], probe.Actor | None]:
    """The build's record and the wrapped actor, or None when building it failed."""
    holder: dict[str, Any] = {}

    def make() -> dict[str, Any]:
        model = probe.build_actor(transformers_config(arch, use_cache=False), run.device, lora)
        built = sum(p.numel() for p in model.parameters())
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if mesh is not None:
            probe.shard(model, mesh, arch.tie_word_embeddings)
        holder["actor"] = probe.Actor(model, arch.vocab_size, run.device)
        return {"parameters_built": built, "trainable_parameters": trainable}

    return run.measure("build", make), holder.get("actor")


def measure_model(run: Run, name: str, mesh: Any) -> None:
    arch, tokens = _arch(name, run.args.dry_run), run.args.tokens
    entry: dict[str, Any] = {
        "architecture": dataclasses.asdict(arch),
        "parameters": parameter_count(arch),
        "log_prob": [],
        "update": [],
    }
    run.doc["models"][name] = entry
    entry["build"], actor = build(run, arch, None, mesh)
    if actor is not None:
        warm = min(tokens)
        entry["static"] = run.measure(f"{name} static", functools.partial(actor.static, warm))
        run.save()
        for t in tokens:
            result = run.measure(f"{name} log_prob T={t}", functools.partial(actor.log_prob, t))
            entry["log_prob"].append({"tokens": t, **result})
            run.save()
        for checkpointing in (True, False):  # off last: its OOMs may leave FSDP state behind
            measure_updates(run, name, actor, checkpointing, entry["update"])
        del actor
        probe.Meter(run.device).settle()
        entry["allocated_after_release_bytes"] = probe.Meter(run.device).allocated()
    run.save()


def measure_updates(
    run: Run, name: str, actor: Any, checkpointing: bool, into: list[dict[str, Any]]
) -> None:
    """Updates at each T in ascending order; once one runs out of memory, larger T are skipped."""
    out_of_memory = False
    for t in sorted(run.args.tokens):
        if out_of_memory:
            result: dict[str, Any] = {"status": "skipped", "reason": "smaller T ran out of memory"}
        else:
            label = f"{name} update T={t} checkpointing={checkpointing}"
            result = run.measure(label, functools.partial(actor.update, t, checkpointing))
            out_of_memory = result["status"] == "oom"
        into.append({"tokens": t, "gradient_checkpointing": checkpointing, **result})
        run.save()


def measure_lora(run: Run, mesh: Any) -> None:
    args = run.args
    arch = _arch(args.lora_model, args.dry_run)
    lora = {"r": args.lora_rank, "lora_alpha": args.lora_alpha, "target_modules": "all-linear"}
    entry: dict[str, Any] = {"model": args.lora_model, **lora, "update": []}
    run.doc["lora"] = entry
    entry["build"], actor = build(run, arch, lora, mesh)
    if actor is not None:
        warm = min(args.tokens)
        entry["static"] = run.measure("lora static", functools.partial(actor.static, warm))
        run.save()
        t = args.lora_tokens
        result = run.measure(f"lora update T={t}", functools.partial(actor.update, t, True))
        entry["update"].append({"tokens": t, "gradient_checkpointing": True, **result})
        del actor
        probe.Meter(run.device).settle()
    run.save()


def per_token_fits(entry: dict[str, Any]) -> dict[str, Any]:
    """Least-squares lines through each series' peaks: bytes per token and a fixed part."""
    series = {
        "log_prob": entry["log_prob"],
        "update_checkpointing": [r for r in entry["update"] if r["gradient_checkpointing"]],
        "update_no_checkpointing": [r for r in entry["update"] if not r["gradient_checkpointing"]],
    }
    fits: dict[str, Any] = {
        "logits_bytes_per_token": 2 * entry["architecture"]["vocab_size"],  # bf16 logits
    }
    for key, rows in series.items():
        points = [(r["tokens"], r["peak_extra_bytes"]) for r in rows if r.get("peak_extra_bytes")]
        if len(points) >= 2:
            slope, intercept = statistics.linear_regression(*zip(*points, strict=True))
            fits[key] = {"bytes_per_token": round(slope), "fixed_bytes": round(intercept)}
    return fits


def _gib(value: Any) -> str:
    return f"{value / GIB:.2f}" if isinstance(value, int) else "-"


def _cell(rows: list[dict[str, Any]], **match: Any) -> str:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return _gib(row.get("peak_extra_bytes")) if row["status"] == "ok" else row["status"]
    return "-"


def table(doc: dict[str, Any]) -> str:
    """The results as text: GiB; 'extra' columns are peaks above the static state."""
    lines = ["model | T | static | log_prob extra | update extra ckpt on | ckpt off"]
    for name, entry in doc["models"].items():
        static = _gib(entry.get("static", {}).get("allocated_bytes"))
        for t in doc["setup"]["tokens"]:
            lp = _cell(entry["log_prob"], tokens=t)
            on = _cell(entry["update"], tokens=t, gradient_checkpointing=True)
            off = _cell(entry["update"], tokens=t, gradient_checkpointing=False)
            lines.append(f"{name} | {t} | {static} | {lp} | {on} | {off}")
    if lora := doc.get("lora"):
        static = _gib(lora.get("static", {}).get("allocated_bytes"))
        for row in lora["update"]:
            update = _cell([row])
            lines.append(
                f"{lora['model']} LoRA r{lora['r']} | {row['tokens']} | {static} | - | {update} | -"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device: run with --dry_run for the CPU code path", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.dry_run else "cuda")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    run = Run(args, device)
    with probe.single_process_group(device) as (mesh, error):
        if error is not None:
            print(f"no process group, so no FSDP2: {error}", file=sys.stderr)
            run.doc["setup"]["wrap"] = f"none: autocast casts the fp32 weights ({error})"
        for name in args.models:
            measure_model(run, name, mesh)
            if args.lora_rank and name == args.lora_model:
                measure_lora(run, mesh)
    run.doc["complete"] = not run.cut_short
    run.save()
    print(table(run.doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The model math of one CPU GRPO step, timed alone: the floor under ``timing_s/ref`` and
``timing_s/update_actor``.

Usage: uv run --no-sync python benchmarks/cpu_model_math.py [--model DIR] [--prompts 4]
           [--prompt_tokens 100] [--shared_tokens 28] [--n 16] [--response_tokens 14]
           [--micro_batches 1] [--fsdp2] [--repeats 3]

The CPU step's log-prob passes run each micro batch as one packed forward
(``rlvr/cpu/packing.py``): the prefix its prompts share once, each prompt's rest once, each
response once, logits only from the first last-prompt position on. This builds the step's micro
batches in verl's layout (prompts left-padded to 256 columns, responses right-padded to 24) and
times that same packed forward outside verl, FSDP and Ray: the reference pass (forward), the
actor update's forward and backward, and its AdamW step, each the median of ``--repeats``,
beside this machine's fp32 matmul rate. The packing itself is timed too, as the step pays it,
and the script runs under the malloc settings of verl's CPU workers. The defaults are the
quickstart's step (4 prompts of ~100 tokens sharing a 28-token chat-template prefix, 16
responses of ~14 tokens, one micro batch under configs/hardware/cpu.yaml's token budget); set
them from your own run's ``prompt_length`` and ``response_length``. What a measured step spends
above these floors is not model math. ``--fsdp2`` times the same again with the model wrapped as
verl wraps it on one CPU rank, under the one-rank collectives the workers install
(``rlvr/cpu/collectives.py``), in a second column: what FSDP2 itself adds to the step's math.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
MODEL_DIR = ROOT / "artifacts/models/smollm2-135m-instruct"
PROMPT_WIDTH, RESPONSE_WIDTH = 256, 24  # the quickstart's max_prompt/response_length, at least


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", default=str(MODEL_DIR), help="model folder (default: %(default)s)"
    )
    parser.add_argument("--prompts", type=int, default=4, help="distinct prompts a step")
    parser.add_argument("--prompt_tokens", type=int, default=100, help="tokens per prompt")
    parser.add_argument("--shared_tokens", type=int, default=28, help="prefix all prompts share")
    parser.add_argument("--n", type=int, default=16, help="responses per prompt")
    parser.add_argument("--response_tokens", type=int, default=14, help="tokens per response")
    parser.add_argument(
        "--micro_batches", type=int, default=1, help="prompts split evenly, whole groups"
    )
    parser.add_argument(
        "--fsdp2",
        action="store_true",
        help="also time the model wrapped as verl wraps it on one CPU rank (FSDP2, gloo, the "
        "workers' collectives)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timings per figure (median)")
    args = parser.parse_args(argv)
    for name in ("prompts", "prompt_tokens", "n", "response_tokens", "micro_batches", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if not 0 <= args.shared_tokens < args.prompt_tokens:
        parser.error("--shared_tokens must be from 0 to --prompt_tokens - 1")
    if args.prompts % args.micro_batches:
        parser.error("--micro_batches must divide --prompts (a micro batch holds whole groups)")
    if not (Path(args.model) / "config.json").is_file():
        parser.error(f"--model {args.model}: no config.json (scripts/build_model.py smollm2)")
    return args


def median_seconds(work: Callable[[], object], repeats: int) -> float:
    work()  # warm-up: first-call allocations and kernel choices
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def micro_batch(args: argparse.Namespace, groups: int, vocab: int) -> dict[str, torch.Tensor]:
    """``groups`` prompts x ``--n`` responses in verl's layout: random token ids, the prompts'
    first ``--shared_tokens`` alike, left-padded prompts, right-padded responses."""
    prompt_width = max(PROMPT_WIDTH, args.prompt_tokens)
    response_width = max(RESPONSE_WIDTH, args.response_tokens)
    rows, width = groups * args.n, prompt_width + response_width
    ids = torch.randint(3, vocab, (rows, width))
    mask = torch.zeros(rows, width, dtype=torch.long)
    shared = torch.randint(3, vocab, (args.shared_tokens,))
    start, end = prompt_width - args.prompt_tokens, prompt_width + args.response_tokens
    for group in range(groups):
        prompt = torch.randint(3, vocab, (args.prompt_tokens,))
        prompt[: args.shared_tokens] = shared
        ids[group * args.n : (group + 1) * args.n, start:prompt_width] = prompt
    mask[:, start:end] = 1
    ids[mask == 0] = 0
    positions = (mask[:, :prompt_width].cumsum(-1) - 1).clamp(min=0)
    positions = torch.cat([positions, positions[:, -1:] + torch.arange(1, response_width + 1)], 1)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions,
            "responses": ids[:, prompt_width:]}  # fmt: skip


def forward_flops_of(model: Any, shapes: list[tuple[int, int, int]]) -> tuple[int, int]:
    """(weights, attention) flops of a packed forward over ``(rows, width, kept logits)``:
    2 per weight and token, the output layer only at the kept positions; attention's scores and
    sums dense over each row's width x width, as SDPA computes them under the packed mask."""
    params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    head = model.get_output_embeddings().weight.numel()
    body = params - embedding - (0 if model.config.tie_word_embeddings else head)
    weights = sum(2 * body * rows * width + 2 * head * rows * kept for rows, width, kept in shapes)
    per_layer = 4 * model.config.hidden_size  # QK^T and AV, 2 flops a multiply-add
    layers = model.config.num_hidden_layers
    return weights, sum(per_layer * layers * rows * width**2 for rows, width, _ in shapes)


def step_figures(model: Any, args: argparse.Namespace) -> tuple[int, list[tuple[str, float, int]]]:
    """(packed tokens, [(what, median seconds, flops)]) for the matmul and each piece of the
    step's model math, summed over its micro batches."""
    from rlvr.cpu.packing import PackedLayout, response_log_probs

    groups = args.prompts // args.micro_batches
    batches = [
        micro_batch(args, groups, model.config.vocab_size) for _ in range(args.micro_batches)
    ]
    layouts = [PackedLayout.of(batch) for batch in batches]
    shapes = [(*layout.input_ids.shape, layout.keep) for layout in layouts if layout]
    tokens = sum(rows * width for rows, width, _ in shapes)
    forward_flops = sum(forward_flops_of(model, shapes))

    def forward() -> None:
        with torch.no_grad():
            for batch in batches:
                response_log_probs(model, batch, 1.0, calculate_entropy=False)

    def forward_backward() -> None:
        for batch in batches:
            found = response_log_probs(model, batch, 1.0, calculate_entropy=False)
            assert found is not None
            found[1].sum().backward()
        model.zero_grad(set_to_none=True)

    size = 2048
    left, right = torch.randn(size, size), torch.randn(size, size)
    backward = median_seconds(forward_backward, args.repeats)
    figures = [
        ("fp32 matmul 2048^3", median_seconds(lambda: left @ right, args.repeats), 2 * size**3),
        ("forward (ref pass)", median_seconds(forward, args.repeats), forward_flops),
        ("forward+backward (update)", backward, 3 * forward_flops),
    ]
    for weight in model.parameters():
        weight.grad = torch.zeros_like(weight)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-9)  # verl's optimizer, fp32 here

    def optimizer_step() -> None:  # verl clips the gradient norm first
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    figures.append(("clip + AdamW step (update)", median_seconds(optimizer_step, args.repeats), 0))
    return tokens, figures


def wrap_as_verl(model: Any) -> None:
    """FSDP2 on a one-rank gloo group, as verl 0.6.1's ``apply_fsdp2`` wraps a model with tied
    embeddings (each decoder layer, then the root) under configs/hardware/cpu.yaml
    (``reshard_after_forward: false``, fp32)."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for layer in model.model.layers:
            fully_shard(layer, reshard_after_forward=False)
        fully_shard(model, reshard_after_forward=False)
    except BaseException:
        dist.destroy_process_group()
        raise


@contextlib.contextmanager
def workers_collectives() -> Iterator[None]:
    """The one-rank collectives verl's CPU workers run with (``rlvr/cpu/collectives.py``, which
    ``rlvr.cpu.compat.install`` applies there), undone on leaving: without them FSDP2's gathers
    and reductions copy through gloo, a cost the step does not pay."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from rlvr.cpu import collectives

    saved = dist.reduce_scatter_tensor, dist.all_gather_into_tensor, DTensor.full_tensor
    collectives.reduce_scatter_on_gloo()
    collectives.single_rank_full_tensor()
    try:
        yield
    finally:
        dist.reduce_scatter_tensor, dist.all_gather_into_tensor = saved[:2]
        DTensor.full_tensor = saved[2]  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoModelForCausalLM

    args = parse_args(argv)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.float32, attn_implementation="sdpa"
    )  # the CPU rehearsal's attention (configs/rehearsal/cpu.yaml)
    params = sum(p.numel() for p in model.parameters())
    tokens, figures = step_figures(model, args)
    columns = [figures]
    if args.fsdp2:
        import torch.distributed as dist

        wrap_as_verl(model)  # destroys its process group itself if wrapping fails
        try:
            with workers_collectives():
                columns.append(step_figures(model, args)[1])
        finally:
            dist.destroy_process_group()
    print(f"cpu: {cpu_name()}, torch {torch.__version__} {torch.backends.cpu.get_cpu_capability()}")
    print(f"threads: {torch.get_num_threads()}; model: {args.model} ({params / 1e6:.1f}M params)")
    shape = f"{args.prompts} prompts x {args.n} in {args.micro_batches} packed micro batches"
    print(f"step: {shape} ({tokens} tokens)\n")
    heads = ["seconds", "GFLOP/s"] + (["FSDP2 s", "GFLOP/s"] if args.fsdp2 else [])
    print(f"{'what':<28}" + "".join(f"{head:>10}" for head in heads))
    for index, (name, _, flops) in enumerate(figures):
        cells = []
        for column in columns:
            seconds = column[index][1]
            cells += [f"{seconds:.2f}", f"{flops / seconds / 1e9:.0f}" if flops else "-"]
        print(f"{name:<28}" + "".join(f"{cell:>10}" for cell in cells))
    return 0


def with_workers_malloc() -> None:
    """Run this script again under the malloc settings verl's CPU workers get
    (configs/hardware/cpu.yaml's ``GLIBC_TUNABLES``; glibc reads them only at start), so the
    floors pay for memory as the step does."""
    from omegaconf import OmegaConf

    hardware = OmegaConf.load(ROOT / "configs/hardware/cpu.yaml")
    value = str(hardware.ray_kwargs.ray_init.runtime_env.env_vars.GLIBC_TUNABLES)
    if os.environ.get("GLIBC_TUNABLES") != value:
        os.execve(
            sys.executable, [sys.executable, *sys.argv], {**os.environ, "GLIBC_TUNABLES": value}
        )


if __name__ == "__main__":
    with_workers_malloc()
    raise SystemExit(main())

"""SFT on CPU, fp32 vs bf16 parameters: one forward and backward of a causal LM, side by side.

Usage: uv run python benchmarks/bench_sft_precision.py [--model DIR] [--batch 4] [--length 128]

Why: verl's SFT trainer computes in bf16 (FSDP2 ``MixedPrecisionPolicy``); rlvr/cpu/sft.py keeps
that where the CPU has native bf16 (AVX512-BF16 or AMX) and switches to fp32 elsewhere, where
bf16 matmuls are emulated and several times slower. This prints both timings on this machine
(best of three, after a warm-up) and what ``native_bf16()`` says of it.
"""

from __future__ import annotations

import argparse
import time

import torch

from rlvr.cpu.compat import cpu_threads
from rlvr.cpu.precision import native_bf16


def _step_seconds(model_dir: str, dtype: torch.dtype, batch: int, length: int) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa", dtype=dtype)
    ids = torch.randint(0, model.config.vocab_size, (batch, length), generator=torch.Generator())
    times = []
    for _ in range(4):
        start = time.perf_counter()
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().flatten(0, 1), ids[:, 1:].flatten()
        )
        loss.backward()
        model.zero_grad()
        times.append(time.perf_counter() - start)
    return min(times[1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        default="artifacts/models/smollm2-135m-instruct",
        help="a Hugging Face model folder (scripts/build_model.py smollm2 writes this one)",
    )
    parser.add_argument("--batch", type=int, default=4, help="sequences per step")
    parser.add_argument("--length", type=int, default=128, help="tokens per sequence")
    args = parser.parse_args()
    torch.set_num_threads(cpu_threads(1))
    print(f"native bf16 on this CPU: {native_bf16()}; {torch.get_num_threads()} threads")
    fp32 = _step_seconds(args.model, torch.float32, args.batch, args.length)
    bf16 = _step_seconds(args.model, torch.bfloat16, args.batch, args.length)
    print(f"forward+backward, {args.batch} x {args.length} tokens:")
    print(f"  fp32: {fp32:.2f} s   bf16: {bf16:.2f} s   bf16 / fp32: {bf16 / fp32:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

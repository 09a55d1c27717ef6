"""Temperature sampling: ``torch.multinomial`` (what HF ``generate`` draws with) against the
inverse-CDF draw of rlvr/models/sampling.py, alone and inside the eval's sampled decoding.

Usage: uv run --no-sync python benchmarks/bench_sampling.py [--model smollm2|tiny|DIR]
       [--prompts 16] [--batch_size 16] [--max_tokens 48] [--repeats 3]

1. One draw per row from a softmax over a vocabulary, in ms (median of 20): SmolLM2's 49,152
   tokens at the eval's batch (16 rows) and the quickstart rollout's (64 rows), and Qwen3's
   151,936.
2. The eval HF backend on Countdown prompts (as bench_generation.py renders them), sampled at
   temperature 1 and top-p 1: tokens/s with multinomial (the sampler switched off) and with the
   inverse-CDF sampler, alternating, median of ``--repeats``. The two draw other tokens, so their
   responses differ in length, and with it the prompt's share of the work: both totals print.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_generation import compare, countdown_prompts, model_dir, token_ids

from rlvr.evaluation import generation
from rlvr.evaluation.model import resolve_model
from rlvr.evaluation.settings import SamplingSettings
from rlvr.models.sampling import draw, inverse_cdf_sampling

SHAPES = ((16, 49_152), (64, 49_152), (64, 151_936))
MULTINOMIAL, INVERSE_CDF = "multinomial", "inverse cdf"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="smollm2, tiny or a model folder")
    parser.add_argument("--prompts", type=int, default=16, help="Countdown prompts per run")
    parser.add_argument("--batch_size", type=int, default=16, help="sequences per batch")
    parser.add_argument("--max_tokens", type=int, default=48, help="max new tokens per response")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method")
    return parser.parse_args(argv)


def _median_ms(function: Callable[[], Any], repeats: int = 20) -> float:
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def draws() -> None:
    import torch

    torch.manual_seed(0)
    print(f"one draw per row ({torch.get_num_threads()} threads), ms, median of 20")
    for rows, vocabulary in SHAPES:
        probs = torch.softmax(3 * torch.randn(rows, vocabulary), dim=-1)
        old = _median_ms(functools.partial(torch.multinomial, probs, 1))
        new = _median_ms(functools.partial(draw, probs))
        print(
            f"  {rows:>3} x {vocabulary:>7}: {MULTINOMIAL} {old:7.2f} | {INVERSE_CDF} {new:6.2f}"
            f" | {old / new:5.1f}x"
        )


def with_sampler(run: Callable[..., Any], on: bool) -> Callable[..., Any]:
    """``run`` with the eval's inverse-CDF sampler switched on or off while it runs."""

    def unchanged(config: Any) -> tuple[Any, list[Any]]:
        return config, []

    def switched(*args: Any) -> Any:
        generation.inverse_cdf_sampling = inverse_cdf_sampling if on else unchanged
        try:
            return run(*args)
        finally:
            generation.inverse_cdf_sampling = inverse_cdf_sampling

    return switched


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    draws()
    path = model_dir(args.model)
    backend = generation.HFBackend(resolve_model(str(path)), batch_size=args.batch_size)
    prompts = countdown_prompts(backend.tokenizer, args.prompts, "chat")
    run = token_ids(backend)
    run(prompts[:2], SamplingSettings(max_tokens=4))  # warm-up
    runs = {MULTINOMIAL: with_sampler(run, on=False), INVERSE_CDF: with_sampler(run, on=True)}
    sampled = SamplingSettings(temperature=1.0, top_p=1.0, max_tokens=args.max_tokens)
    rates, outputs = compare(runs, prompts, sampled, args.repeats)
    print(
        f"eval HF backend, {path.name}, {len(prompts)} prompts, batch {args.batch_size}, "
        f"max_tokens {args.max_tokens}; tokens/s, median of {args.repeats} alternating runs"
    )
    print(
        f"  sampled T=1: {MULTINOMIAL} {rates[MULTINOMIAL]:6.1f} | {INVERSE_CDF}"
        f" {rates[INVERSE_CDF]:6.1f} | {rates[INVERSE_CDF] / rates[MULTINOMIAL]:.2f}x"
        f" (response tokens {sum(map(len, outputs[MULTINOMIAL]))} and"
        f" {sum(map(len, outputs[INVERSE_CDF]))}: other draws, other lengths)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

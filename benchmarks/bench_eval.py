"""Generated tokens/s of the eval HF backend on SmolLM2-135M: batched vs one prompt at a time.

Usage: uv run python benchmarks/bench_eval.py [--prompts 16] [--batch_size 16] [--max_tokens 128]

The same Countdown prompts (rendered as in training) are decoded greedily, one ``generate``
call per prompt and then ``batch_size`` prompts per call, in two settings:
- fixed length: every response is decoded to exactly max_tokens (eos ignored, as vLLM's
  throughput benchmark does), so both modes do the same work; this is the target figure:
  batching gives at least 4x at batch 16.
- stop at eos: what an eval run sees. Only tokens up to each end-of-turn count, so a batch
  pays for its longest response; with SmolLM2's short answers and ~200-token prompts the
  compute-bound prefill dominates and the gain is smaller.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from rlvr.evaluation.generation import HFBackend
from rlvr.evaluation.model import resolve_model
from rlvr.evaluation.prompts import load_rows, render_prompt
from rlvr.evaluation.settings import SamplingSettings
from rlvr.tasks.countdown import prepare

ROOT = Path(__file__).resolve().parents[1]
TARGET_SPEEDUP = 4.0


def _timed(backend: HFBackend, prompts: list[list[int]], settings: SamplingSettings):
    start = time.perf_counter()
    results = backend.generate(prompts, settings)
    seconds = time.perf_counter() - start
    tokens = sum(g.num_tokens for group in results for g in group)
    return results, tokens, seconds


def _compare(
    backend: HFBackend, prompts: list[list[int]], args: argparse.Namespace, ignore_eos: bool
) -> float:
    """One prompt per call against batched calls; prints both and returns the speed-up."""
    label = "fixed length (ignore eos)" if ignore_eos else "stop at eos"
    settings = SamplingSettings(max_tokens=args.max_tokens, ignore_eos=ignore_eos)
    backend.batch_size = 1
    one_results, one_tokens, one_s = _timed(backend, prompts, settings)
    backend.batch_size = args.batch_size
    batch_results, batch_tokens, batch_s = _timed(backend, prompts, settings)
    same = sum(
        a[0].token_ids == b[0].token_ids for a, b in zip(one_results, batch_results, strict=True)
    )
    speedup = (batch_tokens / batch_s) / (one_tokens / one_s)
    print(f"== {label}, max_tokens {args.max_tokens}")
    for mode, tokens, seconds in (
        ("one prompt per call", one_tokens, one_s),
        (f"batch {args.batch_size}", batch_tokens, batch_s),
    ):
        print(
            f"  {mode:<20}: {tokens:5d} tokens in {seconds:6.1f} s = {tokens / seconds:6.1f} tok/s"
        )
    print(f"  speed-up {speedup:.2f}x; identical greedy responses: {same}/{len(prompts)}")
    return speedup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16, help="prompts decoded in each mode")
    parser.add_argument("--batch_size", type=int, default=16, help="sequences per batched call")
    parser.add_argument("--max_tokens", type=int, default=256, help="max new tokens per response")
    parser.add_argument(
        "--template", default="chat", help="Countdown prompt template (chat, think, fewshot)"
    )
    parser.add_argument(
        "--model",
        default=str(ROOT / "artifacts/models/smollm2-135m-instruct"),
        help="model folder (built with scripts/build_model.py smollm2 when missing)",
    )
    args = parser.parse_args()

    model_dir = Path(args.model)
    if not model_dir.exists():
        from rlvr.models.smollm2 import build

        print(f"building SmolLM2-135M-Instruct into {model_dir} ...")
        build(model_dir)
    backend = HFBackend(resolve_model(str(model_dir)), batch_size=1)
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare(
            "generate", f"{tmp}/cd", train_size=8, test_size=args.prompts, template=args.template
        )
        rows = load_rows(data.paths["test"])
    prompts = [render_prompt(backend.tokenizer, row["prompt"]) for row in rows]
    backend.generate(prompts[:1], SamplingSettings(max_tokens=4))  # warm-up
    print(
        f"model: {model_dir.name}, {len(prompts)} Countdown prompts ({args.template}, "
        f"{sum(map(len, prompts)) / len(prompts):.0f} tokens on average), greedy"
    )

    speedups = {
        label: _compare(backend, prompts, args, ignore_eos)
        for label, ignore_eos in (("fixed length (ignore eos)", True), ("stop at eos", False))
    }
    headline = speedups["fixed length (ignore eos)"]
    print(
        f"batching speed-up on decoding: {headline:.2f}x (target >= {TARGET_SPEEDUP}x at batch 16)"
    )
    if headline < TARGET_SPEEDUP:
        print("FAIL: below target", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

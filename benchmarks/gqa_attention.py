"""Decoding with transformers' ``sdpa`` against ``grouped_sdpa`` (rlvr/models/attention.py).

Usage: uv run --no-sync python benchmarks/gqa_attention.py [--model DIR] [--prompts 16] [--n 4]
       [--tokens 24] [--repeats 3]

Decodes the way eval and the CPU rollout do: ``--prompts`` distinct left-padded prompts of
random lengths, each repeated ``--n`` times, prefilled once (``shared_prompt_cache``), then
``generate`` for exactly ``--tokens`` new tokens, greedy. Runs alternate sdpa, grouped, sdpa...
and the median wall seconds of each are printed side by side with their ratio, and whether the
two produced the same tokens. The default model is the quickstart's SmolLM2-135M-Instruct
(9 query heads, 3 key/value heads); build it first with `uv run scripts/build_model.py smollm2`.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from rlvr.common.cli import docstring_parser

ROOT = Path(__file__).resolve().parents[1]


def _batch(prompts: int, n: int, vocab: int) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(90, 120, (prompts,), generator=generator).tolist()
    width = max(lengths)
    ids = torch.zeros(prompts, width, dtype=torch.long)
    mask = torch.zeros(prompts, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, width - length :] = torch.randint(3, vocab, (length,), generator=generator)
        mask[row, width - length :] = 1
    return ids.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)


def _decode(model: Any, ids: Any, mask: Any, tokens: int) -> tuple[float, float, Any]:
    """Seconds of the shared prefill, seconds of ``generate`` after it, and its output."""
    import torch

    from rlvr.models.prefill import shared_prompt_cache

    start = time.perf_counter()
    with torch.no_grad():
        cache = shared_prompt_cache(model, ids, mask)
        prefilled = time.perf_counter()
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            past_key_values=cache,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=False,
            pad_token_id=0,
        )
    return prefilled - start, time.perf_counter() - prefilled, out


def main(argv: list[str] | None = None) -> int:
    parser = docstring_parser(__doc__)
    parser.add_argument("--model", default=str(ROOT / "artifacts/models/smollm2-135m-instruct"))
    parser.add_argument("--prompts", type=int, default=16, help="distinct prompts (16)")
    parser.add_argument("--n", type=int, default=4, help="samples per prompt (4)")
    parser.add_argument("--tokens", type=int, default=24, help="new tokens per row (24)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (3)")
    args = parser.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.models.attention import register

    names = {"sdpa": "sdpa", "grouped": register()}
    models = {
        label: AutoModelForCausalLM.from_pretrained(
            args.model, dtype=torch.float32, attn_implementation=name
        ).eval()
        for label, name in names.items()
    }
    ids, mask = _batch(args.prompts, args.n, models["sdpa"].config.vocab_size)
    seconds: dict[str, list[tuple[float, float]]] = {label: [] for label in models}
    outputs: dict[str, Any] = {}
    for _ in range(args.repeats):
        for label, model in models.items():
            prefill, decode, outputs[label] = _decode(model, ids, mask, args.tokens)
            seconds[label].append((prefill, decode))
    rows = len(ids)
    print(f"{rows} rows ({args.prompts} prompts x {args.n}), {args.tokens} new tokens each, ")
    print(f"threads {torch.get_num_threads()}, median of {args.repeats}:")
    print("| attention | prefill s | decode s | decode tokens/s |")
    print("|---|---|---|---|")
    medians = {}
    for label, runs in seconds.items():
        prefill, decode = (statistics.median(run[i] for run in runs) for i in (0, 1))
        medians[label] = decode
        print(f"| {label} | {prefill:.2f} | {decode:.2f} | {rows * args.tokens / decode:.1f} |")
    print(f"decode time grouped / sdpa: {medians['grouped'] / medians['sdpa']:.2f}")
    print(f"same tokens: {bool(torch.equal(outputs['sdpa'], outputs['grouped']))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Tokens/s of the eval HF backend (batched ``generate``) against the old hand-written loop.

Usage: uv run --no-sync python benchmarks/bench_generation.py [--model smollm2|tiny|DIR]
       [--prompts 16] [--batch_size 16] [--max_tokens 48] [--repeats 3] [--ignore_eos]

The same Countdown prompts (generated tasks, rendered as eval and verl render them) are decoded,
greedy and sampled (temperature 1, top_p 1.0 and 0.9), by
- "old loop": the KV-cached decoding loop ``HFBackend`` had until it was replaced, loaded from
  git (``--old_rev``, default fcf03c0) into a temporary module; it drops finished rows from the
  batch and folds grouped-query heads instead of copying the KV cache;
- "generate": today's ``HFBackend``, one left-padded ``model.generate`` call per ``batch_size``
  sequences, with an explicit ``GenerationConfig`` and ``use_model_defaults=False``, recording
  raw log-probabilities as the old loop did.
Runs alternate old, generate, old, generate... and medians are reported: tokens/s (tokens up to
and including each response's end-of-turn token, or max_tokens), the ratio old/generate, and
whether greedy responses are token-for-token identical. The old loop was to be kept only if at
least 1.5x faster on greedy and on sampled decoding (issue 14).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.evaluation.generation import HFBackend
from rlvr.evaluation.model import resolve_model
from rlvr.evaluation.settings import SamplingSettings

ROOT = Path(__file__).resolve().parents[1]
BUILT = {"smollm2": "artifacts/models/smollm2-135m-instruct", "tiny": "artifacts/models/tiny"}
SETTINGS = (
    ("greedy", 0.0, 1.0),
    ("sampled T=1 top_p=1.0", 1.0, 1.0),
    ("sampled T=1 top_p=0.9", 1.0, 0.9),
)
KEEP_IF = 1.5  # issue 14: keep a hand-written loop only if at least this much faster
OLD, NEW = "old loop", "generate"

Run = Callable[[list[list[int]], SamplingSettings], list[list[int]]]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        default="smollm2",
        help="smollm2 (SmolLM2-135M-Instruct), tiny (the random test model) or a model folder; "
        "smollm2 and tiny are built offline with scripts/build_model.py when missing",
    )
    parser.add_argument("--prompts", type=int, default=16, help="Countdown prompts per run")
    parser.add_argument(
        "--batch_size", type=int, default=16, help="sequences per batch (eval's default: 16)"
    )
    parser.add_argument("--max_tokens", type=int, default=48, help="max new tokens per response")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per method and setting")
    parser.add_argument(
        "--ignore_eos",
        action="store_true",
        help="decode exactly max_tokens per response (equal work per method) instead of "
        "stopping at the end-of-turn token as eval does",
    )
    parser.add_argument(
        "--template", default="chat", help="Countdown prompt template: chat, think or fewshot"
    )
    parser.add_argument("--seed", type=int, default=0, help="sampling seed of every run")
    parser.add_argument(
        "--old_rev", default="fcf03c0", help="git revision with the old loop's generation.py"
    )
    return parser.parse_args(argv)


def model_dir(name: str) -> Path:
    """The model folder, built offline with scripts/build_model.py when a named one is missing."""
    if name not in BUILT:
        return Path(name)
    path = ROOT / BUILT[name]
    if not (path / "config.json").exists():
        print(f"building {name} into {path} ...", flush=True)
        build = [sys.executable, str(ROOT / "scripts/build_model.py"), name]
        subprocess.run(build, check=True, cwd=ROOT)
    return path


def old_backend_class(rev: str) -> Any:
    """The old loop's ``HFBackend``: ``rev``'s generation.py, imported from a temporary file."""
    code = subprocess.run(
        ["git", "show", f"{rev}:rlvr/evaluation/generation.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    name = "old_generation_loop"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.py"
        path.write_text(code)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return module.HFBackend


def countdown_prompts(tokenizer: Any, count: int, template: str) -> list[list[int]]:
    """``count`` generated Countdown test prompts, rendered exactly as eval renders them."""
    from rlvr.evaluation.prompts import load_rows, render_prompt
    from rlvr.tasks.countdown import prepare

    with tempfile.TemporaryDirectory() as tmp:
        data = prepare("generate", f"{tmp}/cd", train_size=8, test_size=count, template=template)
        rows = load_rows(data.paths["test"])
    return [render_prompt(tokenizer, row["prompt"]) for row in rows]


def token_ids(backend: Any) -> Run:
    """A backend's first response per prompt, as token ids (cut at the end-of-turn token)."""

    def run(prompts: list[list[int]], sampling: SamplingSettings) -> list[list[int]]:
        return [group[0].token_ids for group in backend.generate(prompts, sampling)]

    return run


def compare(
    runs: dict[str, Run], prompts: list[list[int]], sampling: SamplingSettings, repeats: int
) -> tuple[dict[str, float], dict[str, list[list[int]]]]:
    """Median tokens/s of each run, timed alternately, and each one's last outputs."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    outputs: dict[str, list[list[int]]] = {}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            outputs[name] = run(prompts, sampling)
            rates[name].append(sum(map(len, outputs[name])) / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}, outputs


def report(label: str, rates: dict[str, float], outputs: dict[str, list[list[int]]]) -> float:
    ratio = rates[OLD] / rates[NEW]
    line = (
        f"{label:<22} {OLD} {rates[OLD]:6.1f} tok/s | {NEW} {rates[NEW]:6.1f} tok/s"
        f" | {OLD}/{NEW} {ratio:.2f}x"
    )
    if label == "greedy":
        same = sum(a == b for a, b in zip(outputs[OLD], outputs[NEW], strict=True))
        line += f" | identical greedy responses {same}/{len(outputs[OLD])}"
    print(line, flush=True)
    return ratio


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse_args(argv)
    path = model_dir(args.model)
    source = resolve_model(str(path))
    old = old_backend_class(args.old_rev)(source, batch_size=args.batch_size)
    new = HFBackend(source, batch_size=args.batch_size)
    runs = {OLD: token_ids(old), NEW: token_ids(new)}
    prompts = countdown_prompts(new.tokenizer, args.prompts, args.template)
    for run in runs.values():  # warm-up
        run(prompts[:2], SamplingSettings(max_tokens=4))
    print(
        f"model {path.name} on {new.device} ({torch.get_num_threads()} threads); "
        f"{len(prompts)} Countdown {args.template} prompts, "
        f"{sum(map(len, prompts)) / len(prompts):.0f} tokens on average; batch {args.batch_size}, "
        f"max_tokens {args.max_tokens}, {'eos ignored' if args.ignore_eos else 'stop at eos'}; "
        f"old loop from {args.old_rev}; median of {args.repeats} alternating runs"
    )
    ratios = []
    for label, temperature, top_p in SETTINGS:
        sampling = SamplingSettings(
            temperature=temperature,
            top_p=top_p,
            max_tokens=args.max_tokens,
            seed=args.seed,
            ignore_eos=args.ignore_eos,
        )
        ratios.append(report(label, *compare(runs, prompts, sampling, args.repeats)))
    verdict = "yes" if min(ratios) >= KEEP_IF else "no"
    print(f"old loop >= {KEEP_IF}x faster than generate on every setting: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Reward throughput and worst-case latency, against the common regex + eval design.

Usage: uv run python benchmarks/bench_rewards.py [--n 20000] [--seed 0]

Builds a fixed corpus of realistic responses (think block + answer; right, wrong, malformed),
times our Countdown reward and the usual unsafe baseline (extract with a regex, character filter,
number check, ``eval``) on the same corpus, which holds only inputs where that baseline is safe
(no exponent bombs, no names), then the worst single-call latency of our rewards over an
adversarial set. Prints the figures and checks them against the targets.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewards import countdown, gsm8k

WORST_CASE_BUDGET_S = 0.005
RATIO_FLOOR = 0.5


def baseline_countdown(solution_str: str, ground_truth: dict, format_score: float = 0.1) -> float:
    """The design many RLVR repos ship: regex extraction, character filter, then ``eval``."""
    matches = re.findall(r"<answer>(.*?)</answer>", solution_str, re.DOTALL)
    if not matches:
        return 0.0
    equation = matches[-1].strip()
    try:
        used = sorted(int(n) for n in re.findall(r"\d+", equation))
        if used != sorted(int(n) for n in ground_truth["numbers"]):
            return format_score
        if not re.match(r"^[\d+\-*/().\s]+$", equation):
            return format_score
        value = eval(equation, {"__builtins__": None}, {})  # the unsafe part we replace
        return 1.0 if abs(value - ground_truth["target"]) < 1e-5 else format_score
    except Exception:
        return format_score


def _random_expression(rng: random.Random, numbers: list[int]) -> tuple[str, float | None]:
    items = [(str(n), float(n)) for n in numbers]
    rng.shuffle(items)
    while len(items) > 1:
        i = rng.randrange(len(items) - 1)
        (a, av), (b, bv) = items[i], items[i + 1]
        op = rng.choice("+-*/")
        if op == "/" and (bv == 0 or av is None or bv is None):
            op = "+"
        value = (
            None
            if av is None or bv is None
            else {"+": av + bv, "-": av - bv, "*": av * bv, "/": av / bv if bv else 0}[op]
        )
        items[i : i + 2] = [(f"({a} {op} {b})", value)]
    return items[0]


def build_corpus(n: int, seed: int) -> list[tuple[str, dict]]:
    """Realistic responses: about 40% right, 30% wrong, 30% malformed in common ways."""
    rng = random.Random(seed)
    corpus = []
    for _ in range(n):
        numbers = [rng.randint(1, 99) for _ in range(rng.choice((3, 4)))]
        expr, value = _random_expression(rng, numbers)
        kind = rng.random()
        target = (
            round(value)
            if value is not None and kind < 0.4 and value == int(value)
            else rng.randint(1, 200)
        )
        thinking = (
            "<think>"
            + " ".join(
                f"try {rng.randint(1, 99)} + {rng.randint(1, 99)}"
                for _ in range(rng.randint(3, 12))
            )
            + "</think>\n"
        )
        if kind < 0.7:
            body = f"<answer>{expr}</answer>"
        elif kind < 0.8:
            body = f"<answer>{expr} = {target}</answer>"  # equation, not expression
        elif kind < 0.9:
            body = f"The answer is {expr}."  # no tags
        else:
            body = f"<answer>{expr}"  # truncated
        corpus.append((thinking + body, {"target": target, "numbers": numbers}))
    return corpus


def adversarial_set() -> dict[str, tuple[str, object]]:
    mb = 1_000_000
    cd = {"target": 13, "numbers": [2, 3, 7]}
    cases: dict[str, tuple[str, object]] = {
        "exponent bomb": ("<answer>44**19**35</answer>", cd),
        "5000-deep parens": ("<answer>" + "(" * 5000 + "2*3+7" + ")" * 5000 + "</answer>", cd),
        "1MB digits in answer": ("<answer>" + "9" * mb + "</answer>", cd),
        "1MB of '+'": ("+" * mb, cd),
        "1MB think opens": ("<think>" * (mb // 7), cd),
        "1MB answer tags": ("<answer>2*3+7</answer>" * (mb // 22), cd),
        "1MB think blocks": (("<think><answer>1</answer></think>") * (mb // 33), cd),
        "injection": ("<answer>__import__('os').system('true')</answer>", cd),
    }
    for ch in "+k>/<9 ":
        cases[f"1MB of {ch!r} in answer"] = ("<answer>" + ch * mb + "</answer>", cd)
    return cases


def time_per_call(fn, corpus) -> float:
    start = time.perf_counter()
    for text, gt in corpus:
        fn(text, gt)
    return (time.perf_counter() - start) / len(corpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="responses in the corpus")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes; the best is kept")
    args = parser.parse_args()

    corpus = build_corpus(args.n, args.seed)
    ours = lambda text, gt: countdown.compute_score("countdown", text, gt)["score"]  # noqa: E731
    base = baseline_countdown

    agree = sum(abs(ours(t, g) - base(t, g)) < 1e-9 for t, g in corpus)
    ours_s = min(time_per_call(ours, corpus) for _ in range(args.repeats))
    base_s = min(time_per_call(base, corpus) for _ in range(args.repeats))
    ratio = base_s / ours_s
    print(
        f"corpus: {len(corpus)} responses (seed {args.seed}); "
        f"scores agree with baseline on {agree / len(corpus):.1%}"
    )
    print(f"countdown ours     : {1 / ours_s:10,.0f} responses/s  ({ours_s * 1e6:.1f} us/call)")
    print(f"countdown regex+eval: {1 / base_s:10,.0f} responses/s  ({base_s * 1e6:.1f} us/call)")
    print(f"speed ratio ours/baseline: {ratio:.2f} (floor {RATIO_FLOOR}, target 1.0)")

    gsm_corpus = [
        (f"Step... so {i % 500} + 1\n#### {i % 500 + (i % 3 == 0)}", str(i % 500 + 1))
        for i in range(args.n)
    ]
    gsm = lambda text, gt: gsm8k.compute_score("openai/gsm8k", text, gt)["score"]  # noqa: E731
    gsm_s = min(time_per_call(gsm, gsm_corpus) for _ in range(args.repeats))
    print(f"gsm8k strict       : {1 / gsm_s:10,.0f} responses/s  ({gsm_s * 1e6:.1f} us/call)")

    worst_name, worst = "", 0.0
    for name, (text, gt) in adversarial_set().items():
        for fn, truth in (
            (ours, gt),
            (lambda t, g: gsm8k.compute_score("x", t, g, method="flexible"), "72"),
        ):
            for _ in range(3):
                start = time.perf_counter()
                fn(text, truth)
                elapsed = time.perf_counter() - start
                if elapsed > worst:
                    worst_name, worst = name, elapsed
    print(
        f"worst-case latency over {len(adversarial_set())} adversarial inputs (both rewards): "
        f"{worst * 1e3:.3f} ms ({worst_name}); budget {WORST_CASE_BUDGET_S * 1e3:.0f} ms"
    )

    ok = ratio >= RATIO_FLOOR and worst < WORST_CASE_BUDGET_S
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Countdown generator and solver speed, plus a full prep of generated data.

Usage: uv run python benchmarks/bench_data_prep.py [--n 100000]

Target: 100,000 generated tasks in under 20 s on one core (the generator alone, then the whole
prep including rows and Parquet). Also reports the exact solver's tasks/s on generated tasks.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from rlvr.tasks.countdown import prepare
from rlvr.tasks.countdown_puzzles import GeneratorSpec, generate_puzzles, solve

TARGET_S = 20.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="tasks to generate")
    parser.add_argument("--solve_n", type=int, default=2_000, help="tasks timed through the solver")
    args = parser.parse_args()

    start = time.perf_counter()
    tasks = generate_puzzles(args.n, GeneratorSpec(seed=0))
    gen_s = time.perf_counter() - start
    print(f"generator: {args.n:,} tasks in {gen_s:.2f} s ({args.n / gen_s:,.0f} tasks/s)")

    start = time.perf_counter()
    for task in tasks[: args.solve_n]:
        solve(task.numbers, task.target)
    solve_s = time.perf_counter() - start
    print(
        f"solver: {args.solve_n:,} tasks in {solve_s:.2f} s ({args.solve_n / solve_s:,.0f} tasks/s)"
    )

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        prepare("generate", out, train_size=args.n - 1024, test_size=1024, seed=0)
        prep_s = time.perf_counter() - start
    print(f"full prep (generate + split + rows + parquet): {args.n:,} tasks in {prep_s:.2f} s")
    ok = gen_s < TARGET_S and prep_s < TARGET_S
    print(f"target: under {TARGET_S:.0f} s -> {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

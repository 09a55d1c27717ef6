"""What a compose with value overrides costs: Hydra's whole compose vs rlvr's compose(), which
merges the files once per experiment and group choices and applies the values to a copy.

Usage: uv run python benchmarks/compose_speed.py [--repeats N] [EXPERIMENT ...]

For each experiment, N composes that differ only in a value (``trainer.total_training_steps``),
as pre-flight, eval, the sweep and the tests make them; the first compose() of an experiment
(the merge it keeps) is counted in its mean. Prints mean seconds per compose, both ways, and the
ratio. Both results are checked equal before timing (tests/test_config.py checks more).
"""

from __future__ import annotations

import time

from rlvr.common.cli import docstring_parser
from rlvr.config import compose as composing


def mean_seconds(experiment: str, repeats: int) -> tuple[float, float]:
    """(Hydra's whole compose, compose()) mean seconds over ``repeats`` distinct values."""
    from omegaconf import OmegaConf

    value = ["trainer.total_training_steps=123"]
    ours = OmegaConf.to_container(composing.compose(experiment, value))
    assert ours == OmegaConf.to_container(composing.whole_compose(experiment, value)), experiment
    composing.clear_cache()  # time compose() from a cold start, its own merge included
    timings = []
    for compose in (composing.whole_compose, composing.compose):
        start = time.perf_counter()
        for step in range(repeats):
            compose(experiment, [f"trainer.total_training_steps={step + 1}"])
        timings.append((time.perf_counter() - start) / repeats)
    return timings[0], timings[1]


def main(argv: list[str] | None = None) -> int:
    parser = docstring_parser(__doc__)
    parser.add_argument("experiments", nargs="*", help="configs/*.yaml names (default: all)")
    parser.add_argument("--repeats", type=int, default=10, help="composes per experiment (10)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    for experiment in args.experiments:
        try:
            composing.check_experiment(experiment)
        except composing.ConfigError as exc:
            parser.error(str(exc))
    print("| experiment | Hydra's whole compose s | compose() s | ratio |")
    print("|---|---|---|---|")
    for experiment in args.experiments or composing.experiments():
        whole, ours = mean_seconds(experiment, args.repeats)
        print(f"| {experiment} | {whole:.3f} | {ours:.3f} | {whole / ours:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

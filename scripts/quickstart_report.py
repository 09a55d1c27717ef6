"""The quickstart's before/after report: greedy and sampled deltas with 95% intervals, a curve.

Usage: uv run scripts/quickstart_report.py --out DIR --greedy BEFORE AFTER --sampled BEFORE AFTER
           --metrics RUN/metrics.jsonl [--probe RUN] [--experiment NAME] [--steps N] [--seconds S]

Each delta is paired over prompts (per-prompt mean after minus before; Student t 95% interval,
rlvr/evaluation/paired.py); runs on different prompts or with different sampling are refused
(exit code 2). Prints a Markdown table, writes DIR/reward_curve.png (critic/score/mean per step
and the validation rates, from the run's metrics.jsonl: rlvr/report/curves.py) and
DIR/quickstart_report.json with sampled_score_delta, sampled_score_delta_ci95 and seconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlvr.common.cli import docstring_parser
from rlvr.common.files import write_json_atomic
from rlvr.evaluation.errors import EvalError
from rlvr.evaluation.paired import PairedDelta, deltas_markdown, paired_deltas
from rlvr.evaluation.records import load_summary
from rlvr.report.curves import plot_reward_curve


def build_parser() -> argparse.ArgumentParser:
    parser = docstring_parser(__doc__)
    add = parser.add_argument
    add("--out", required=True, help="folder for reward_curve.png and quickstart_report.json")
    add("--greedy", nargs=2, required=True, metavar=("BEFORE", "AFTER"), help="reward runs")
    add(
        "--sampled",
        nargs=2,
        required=True,
        metavar=("BEFORE", "AFTER"),
        help="analyse or passk runs at the training temperature, same prompts and seed",
    )
    add("--metrics", required=True, help="the training run's metrics.jsonl")
    add("--probe", help="the analyse run whose verdict was printed before training")
    add("--experiment", default="", help="the training experiment (recorded)")
    add("--steps", type=int, default=0, help="GRPO steps trained (recorded)")
    add("--seconds", type=int, default=0, help="wall time so far (recorded)")
    return parser


def _sampling_note(run: str) -> str:
    sampling = load_summary(run).header.sampling
    return f"n={sampling.get('n')}, temperature={sampling.get('temperature')}"


def report_table(greedy: list[PairedDelta], sampled: list[PairedDelta], sampled_run: str) -> str:
    prompts = greedy[0].interval.n
    lines = [
        f"| metric ({prompts} prompts) | before | after | delta | 95% CI (paired over prompts) |",
        "|---|---|---|---|---|",
        *deltas_markdown(greedy, "greedy"),
        *deltas_markdown(sampled, "sampled"),
        "",
        f"sampled: {_sampling_note(sampled_run)} per prompt; * = the interval excludes zero",
    ]
    return "\n".join(lines)


def report_json(
    args: argparse.Namespace, greedy: list[PairedDelta], sampled: list[PairedDelta], curve: str
) -> dict[str, object]:
    score = {d.part: d for d in sampled}["score"].interval
    greedy_score = {d.part: d for d in greedy}["score"].interval
    verdict = None
    if args.probe:
        judged = load_summary(args.probe).verdict
        verdict = judged.label if judged is not None else None
    return {
        "experiment": args.experiment,
        "steps": args.steps,
        "seconds": args.seconds,
        "probe_verdict": verdict,
        "sampled_score_delta": score.mean,
        "sampled_score_delta_ci95": [score.low, score.high],
        "sampled_score_gain_significant": score.low > 0.0,
        "greedy_score_delta": greedy_score.mean,
        "greedy_score_delta_ci95": [greedy_score.low, greedy_score.high],
        "greedy": [d.to_json() for d in greedy],
        "sampled": [d.to_json() for d in sampled],
        "sampling": _sampling_note(args.sampled[1]),
        "reward_curve": curve,
        "runs": {"greedy": args.greedy, "sampled": args.sampled, "probe": args.probe},
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    try:
        greedy = paired_deltas(*args.greedy)
        sampled = paired_deltas(*args.sampled)
    except EvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report_table(greedy, sampled, args.sampled[1]))
    curve = ""
    try:
        curve = str(plot_reward_curve(Path(args.metrics), out / "reward_curve.png"))
        print(f"\nreward curve: {curve}")
    except ValueError as exc:  # no training step logged: report the evals anyway
        print(f"\nno reward curve: {exc}", file=sys.stderr)
    write_json_atomic(out / "quickstart_report.json", report_json(args, greedy, sampled, curve))
    print(f"report: {out / 'quickstart_report.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

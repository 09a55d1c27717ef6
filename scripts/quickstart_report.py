"""The quickstart's report: what SFT and then GRPO changed, with 95% intervals, the run's alarms.

Usage: uv run scripts/quickstart_report.py --out DIR --greedy SFT GRPO --sampled SFT GRPO
           --base BASE --metrics RUN/metrics.jsonl --run RUN [--probe RUN] [--experiment NAME]
           [--steps N] [--seed N] [--seconds S] [--stage_times FILE]

The headline is sampled pass@1 (correct answers) of the GRPO model against the SFT model it
started from, paired over prompts (per-prompt mean after minus before; Student t 95% interval,
rlvr/evaluation/paired.py); greedy pass@1 and format rate beside it. SFT's own gain (the SFT
model against the base model, sampled) is reported separately, over the base run's prompts (the
quickstart probes the base model on the first of the held-out prompts only). Runs on different
prompts or with different sampling are refused (exit code 2). Builds the GRPO run's report
(RUN/report.md, its alarms: docs/REPORT.md; near its top a "Held-out change" section: these
intervals and whether they exclude zero) and prints its verdict; prints the training reward's
first and last quarter (critic/score/mean of the training batches, mean over each quarter of the
steps); prints the stage times scripts/stages.sh recorded (DIR/stage_times.jsonl: seconds and
share of the total); writes DIR/reward_curve.png and DIR/quickstart_report.json
(sampled_pass1_delta, sampled_pass1_delta_ci95, alarms_fired,
held_out_verdict, training_score, seed, stage_seconds, eval_tokens_per_second, ...).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlvr.common.cli import docstring_parser
from rlvr.common.disk_full import report_disk_full
from rlvr.common.files import write_json_atomic
from rlvr.cpu.precision import AUTO, GRPO_PRECISIONS
from rlvr.evaluation import EvalError
from rlvr.evaluation.paired import PairedDelta, deltas_markdown, paired_deltas
from rlvr.evaluation.records import load_summary
from rlvr.evaluation.statistics import held_out_section, interval_verdict
from rlvr.report import ReportError, build
from rlvr.report.curves import CurveData, plot_reward_curve, quarter_means
from rlvr.report.stage_times import (
    STAGE_TIMES_FILE,
    read_stage_times,
    stage_rows,
    stage_table,
    with_outside,
)


def build_parser() -> argparse.ArgumentParser:
    parser = docstring_parser(__doc__)
    add = parser.add_argument
    add("--out", required=True, help="folder for reward_curve.png and quickstart_report.json")
    add("--greedy", nargs=2, required=True, metavar=("SFT", "GRPO"), help="reward runs")
    add(
        "--sampled",
        nargs=2,
        required=True,
        metavar=("SFT", "GRPO"),
        help="analyse or passk runs at the training temperature, same prompts and seed",
    )
    add("--base", required=True,
        help="the base model's sampled run (SFT's own gain, over its prompts: all or the first "
        "of the SFT run's)")  # fmt: skip
    add("--metrics", required=True, help="the GRPO run's metrics.jsonl")
    add("--run", required=True, help="the GRPO run folder (its report and alarms)")
    add("--probe", help="the analyse run whose verdict was printed before GRPO")
    add("--experiment", default="", help="the GRPO experiment (recorded)")
    add("--steps", type=int, default=0, help="GRPO steps trained (recorded)")
    add("--seed", type=int, default=None, help="the run's seed, quickstart.sh --seed (recorded)")
    add("--grpo_precision", choices=[p for p in GRPO_PRECISIONS if p != AUTO], default="fp32",
        help="GRPO's precision as quickstart.sh decided it (recorded)")  # fmt: skip
    add("--seconds", type=int, default=0, help="wall time so far (recorded)")
    add("--stage_times", help=f"scripts/stages.sh's stage times (default: OUT/{STAGE_TIMES_FILE})")
    return parser


def _sampling_note(run: str) -> str:
    sampling = load_summary(run).header.sampling
    return f"n={sampling.get('n')}, temperature={sampling.get('temperature')}"


def _by_part(deltas: list[PairedDelta]) -> dict[str, PairedDelta]:
    return {d.part: d for d in deltas}


def report_table(
    greedy: list[PairedDelta], sampled: list[PairedDelta], sft: list[PairedDelta], run: str
) -> str:
    prompts = greedy[0].interval.n
    ordered = [_by_part(sampled)["success"], *(d for d in sampled if d.part != "success")]
    lines = [
        f"GRPO model vs the SFT model it started from ({prompts} held-out prompts):",
        "",
        "| metric | SFT | GRPO | delta | 95% CI (paired over prompts) |",
        "|---|---|---|---|---|",
        *deltas_markdown(ordered, "sampled"),
        *deltas_markdown(greedy, "greedy"),
        "",
        f"SFT's own gain (SFT model vs the base model, sampled, {sft[0].interval.n} of those "
        "prompts):",
        "",
        "| metric | base | SFT | delta | 95% CI (paired over prompts) |",
        "|---|---|---|---|---|",
        *deltas_markdown(sft, "sampled"),
        "",
        f"sampled: {_sampling_note(run)} per prompt; * = the interval excludes zero",
    ]
    return "\n".join(lines)


def _interval(delta: PairedDelta) -> dict[str, object]:
    ci = delta.interval
    return {"delta": ci.mean, "ci95": [ci.low, ci.high], "significant": ci.low > 0.0}


def report_json(
    args: argparse.Namespace,
    deltas: dict[str, list[PairedDelta]],
    curve: str,
    alarms_fired: list[str],
) -> dict[str, object]:
    sampled, greedy = _by_part(deltas["sampled"]), _by_part(deltas["greedy"])
    pass1, score = sampled["success"].interval, sampled["score"].interval
    verdict = None
    if args.probe:
        judged = load_summary(args.probe).verdict
        verdict = judged.label if judged is not None else None
    return {
        "experiment": args.experiment,
        "steps": args.steps,
        "seed": args.seed,
        "grpo_precision": args.grpo_precision,
        "seconds": args.seconds,
        "probe_verdict": verdict,
        "sampled_pass1_before": sampled["success"].before,
        "sampled_pass1_after": sampled["success"].after,
        "sampled_pass1_delta": pass1.mean,
        "sampled_pass1_delta_ci95": [pass1.low, pass1.high],
        "sampled_pass1_gain_significant": pass1.low > 0.0,
        "greedy_pass1": _interval(greedy["success"]),
        "format_rate": _interval(sampled["format"]),
        "sampled_score_delta": score.mean,
        "sampled_score_delta_ci95": [score.low, score.high],
        "sft_sampled_pass1": _interval(_by_part(deltas["sft"])["success"]),
        "alarms_fired": alarms_fired,
        "greedy": [d.to_json() for d in deltas["greedy"]],
        "sampled": [d.to_json() for d in deltas["sampled"]],
        "sft": [d.to_json() for d in deltas["sft"]],
        "sampling": _sampling_note(args.sampled[1]),
        "reward_curve": curve,
        "runs": {
            "greedy": args.greedy,
            "sampled": args.sampled,
            "base": args.base,
            "probe": args.probe,
            "grpo": args.run,
        },
    }


def held_out(deltas: dict[str, list[PairedDelta]], sampling: str) -> list[str]:
    """report.md's "Held-out change" section: sampled and greedy pass@1, SFT -> GRPO."""
    success = _by_part(deltas["sampled"])["success"]
    return held_out_section(success, _by_part(deltas["greedy"])["success"], "SFT", "GRPO", sampling)


def timing(args: argparse.Namespace) -> dict[str, object]:
    """Print where the quickstart's time went; the quickstart_report.json keys that say it."""
    path = Path(args.stage_times or Path(args.out) / STAGE_TIMES_FILE)
    times, total = with_outside(read_stage_times(path), float(args.seconds))
    runs = [args.base, *args.sampled, *args.greedy]  # by folder name, as the benchmark shows them
    rates = {Path(run).name: load_summary(run).tokens_per_second for run in runs}
    if times:
        print(f"\nstage times ({path}):")
        print("\n".join(stage_table(times, total)))
    known = {name: rate for name, rate in rates.items() if rate is not None}
    if known:
        print("eval tokens/s: " + ", ".join(f"{k} {v:,.1f}" for k, v in known.items()))
    return {
        "stage_seconds": stage_rows(times, total),
        "stage_seconds_total": round(total, 3),
        "eval_tokens_per_second": rates,
    }


def training_rise(curve: CurveData | None) -> dict[str, float | int] | None:
    """Print the training reward's first and last quarter means; their JSON, or None when the run
    logged under 4 steps (or no metrics file could be read: ``curve`` None)."""
    quarters = quarter_means(curve.reward) if curve is not None else None
    if quarters is None:
        print("training reward: under 4 steps logged, no quarters to compare")
        return None
    print(
        f"training reward (critic/score/mean, {quarters.steps} step(s) a quarter): first quarter "
        f"{quarters.first:.3f} -> last quarter {quarters.last:.3f} ({quarters.rise:+.3f})"
    )
    return quarters.to_json()


def training_curve(metrics: Path, out: Path) -> tuple[str, dict[str, float | int] | None]:
    """The reward curve written to ``out`` ("" when there is none) and the training reward's
    quarters (``training_rise``), both from one read of the run's ``metrics.jsonl``."""
    try:
        data: CurveData | None = CurveData.read(metrics)
        problem = ""
    except (OSError, ValueError) as exc:
        data, problem = None, str(exc)
    rise = training_rise(data)
    try:
        if data is None:
            raise ValueError(problem)
        curve = str(plot_reward_curve(data, out / "reward_curve.png", name=metrics.parent.name))
    except ValueError as exc:  # no training step logged: report the evals anyway
        print(f"no reward curve: {exc}", file=sys.stderr)
        return "", rise
    print(f"reward curve: {curve}")
    return curve, rise


def run_alarms(run: str, preamble: list[str]) -> list[str]:
    """Build the GRPO run's report (report.md with ``preamble`` near its top, figures) and print
    its verdict; the fired keys."""
    report = build(run, preamble=preamble)
    fired = report.fired
    if fired:
        print(f"\nrun report: {len(fired)} alarm(s) fired ({report.path})")
        for alarm in fired:
            print(f"  ALARM {alarm.title}: {alarm.detail}")
    else:
        print(f"\nrun report: no alarm fired ({len(report.alarms)} checks; {report.path})")
    return [alarm.key for alarm in fired]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return write_report(args)
    except Exception as exc:  # a full disk is one line (exit 1); anything else is a bug
        return report_disk_full(exc)


def write_report(args: argparse.Namespace) -> int:
    out = Path(args.out)
    try:
        deltas = {
            "greedy": paired_deltas(*args.greedy),
            "sampled": paired_deltas(*args.sampled),
            # the base probe may run on the first of the held-out prompts only (quickstart.sh)
            "sft": paired_deltas(args.base, args.sampled[0], before_is_subset=True),
        }
    except EvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report_table(deltas["greedy"], deltas["sampled"], deltas["sft"], args.sampled[1]))
    headline = interval_verdict(
        "sampled pass@1", _by_part(deltas["sampled"])["success"].interval, "GRPO"
    )
    print(headline)
    try:
        alarms_fired = run_alarms(args.run, held_out(deltas, _sampling_note(args.sampled[1])))
    except ReportError as exc:
        print(f"error: report: {exc}", file=sys.stderr)
        return 2
    curve, rise = training_curve(Path(args.metrics), out)
    try:
        timed = timing(args)
    except ValueError as exc:  # a damaged stage_times.jsonl: the report stands without it
        print(f"no stage times: {exc}", file=sys.stderr)
        timed = {}
    summary = report_json(args, deltas, curve, alarms_fired)
    summary |= {"held_out_verdict": headline, "training_score": rise, **timed}
    write_json_atomic(out / "quickstart_report.json", summary)
    print(f"report: {out / 'quickstart_report.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

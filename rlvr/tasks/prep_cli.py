"""The data-prep command line of every task: the task's own flags, plus where to write."""

from __future__ import annotations

import argparse

from rlvr.common.cli import OneLineParser
from rlvr.data.prep import run_prep_cli
from rlvr.tasks import get


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The script's docstring as written, and every flag's default."""


def build_parser(task_name: str, description: str | None = None) -> argparse.ArgumentParser:
    spec = get(task_name)
    parser = OneLineParser(
        prog=f"data_prep_{spec.name}.py",
        description=description or spec.summary,
        formatter_class=_Formatter,
    )
    spec.add_prep_arguments(parser)
    parser.add_argument(
        "--local_dir",
        default=str(spec.data_dir),
        help="output folder",
    )
    return parser


def main(task_name: str, argv: list[str] | None = None, description: str | None = None) -> int:
    """Parse ``argv`` with the task's flags and run its prep; exit code 2 on bad input (a usage
    error exits 2 from the parser, in one line)."""
    spec = get(task_name)
    args = build_parser(task_name, description).parse_args(argv)
    return run_prep_cli(lambda: spec.prepare(args))

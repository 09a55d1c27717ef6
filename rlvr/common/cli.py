"""Command-line parsing shared by every CLI: a usage error is one line and exit code 2."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the flag, the problem, where to look) and exit
    2, not the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message}; see {self.prog} --help\n")


def docstring_parser(doc: str) -> OneLineParser:
    """A script's parser from its module docstring: the first paragraph as the description, the
    rest (usage, notes) as the epilog, laid out as written."""
    headline, _, rest = doc.partition("\n\n")
    return OneLineParser(
        description=headline, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value

    parse.__name__ = f"integer in [{low}, {high}]"
    return parse


def float_in(low: float, high: float, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] (or (low, high] with ``low_open``)."""
    interval = f"{'(' if low_open else '['}{low}, {high}]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or not low <= value <= high or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"{text} is not in {interval}")
        return value

    parse.__name__ = f"number in {interval}"
    return parse

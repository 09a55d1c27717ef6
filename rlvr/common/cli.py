"""Command-line parsing shared by every CLI: a usage error is one line and exit code 2."""

from __future__ import annotations

import argparse
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

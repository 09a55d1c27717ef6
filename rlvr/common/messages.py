"""One-line messages from exceptions: every refusal the project prints is one line."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first non-empty line of ``exc``'s message, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

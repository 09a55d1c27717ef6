"""One-line messages from exceptions, as pre-flight prints its refusals."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

"""Refuse to patch, wrap or build on a verl function that is not the one a change was written
against (its parameters, or a line of its source): every runtime change to verl checks first."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def require_parameters(
    function: Callable[..., Any],
    expected: tuple[str, ...],
    decorated: str | None = None,
    *,
    owner: str,
) -> None:
    """Refuse to wrap a verl function whose parameters are not the ones ``owner`` (the module
    that changes it) was written against (verl 0.6.1). ``decorated``: the name of the function a
    decorator's ``(*args, **kwargs)`` wrapper holds (verl's ``GPUMemoryLogger`` keeps no
    ``__wrapped__``)."""
    if decorated is not None:
        held = [cell.cell_contents for cell in getattr(function, "__closure__", None) or ()]
        inner = [f for f in held if inspect.isfunction(f) and f.__name__ == decorated]
        if len(inner) != 1:
            raise RuntimeError(f"rlvr: no {decorated} inside {function!r}; update {owner}")
        function = inner[0]
    found = tuple(inspect.signature(function).parameters)
    if found != expected:
        raise RuntimeError(
            f"rlvr: verl's {function.__qualname__}{found} is not verl 0.6.1's {expected}; "
            f"update {owner} for this verl"
        )


def require_source(function: Callable[..., Any], text: str, consequence: str) -> None:
    """Refuse to build on a verl function whose source no longer holds the line (``text``) a fix
    replaces or relies on; ``consequence`` says what then to do."""
    if text not in inspect.getsource(function):
        raise RuntimeError(
            f"{function.__qualname__} no longer contains {text!r} (verl 0.6.1's line); "
            f"{consequence}"
        )

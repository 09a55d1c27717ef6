"""Shared text handling for the reward functions: think blocks and tagged answers.

Standard library only, and every function does work bounded by C-speed string scans
(``str.find``/``str.rfind``) plus at most ``MAX_CANDIDATES`` Python-level steps, so a 1 MB
adversarial response costs well under a millisecond here.

Thinking rule (documented in docs/REWARD_COUNTDOWN.md): a position in the response is *inside
thinking* when the nearest think tag before it is ``<think>``, or, when there is no think tag
before it, when the first think tag after it is ``</think>`` (the response started inside a
think block that the chat template opened, as DeepSeek-R1 style templates do). Think blocks do
not nest: ``<think> a <think> b </think> c`` leaves ``c`` outside thinking.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

# Rejected candidates (answers found inside thinking) examined before giving up. Each rejection
# skips a whole think block, so only a response with this many think blocks after its last
# real answer is affected; it then scores as "no answer".
MAX_CANDIDATES = 64

# Only the response's last characters are read. CPython's substring search costs up to ~4 ns per
# character on adversarial text (characters that collide with the needle's shift table), and a
# grade makes a handful of scans, so this bounds a call to about a millisecond. 131,072 characters
# is over 30k tokens of English, longer than any response length the recipes configure; a window
# that starts inside a think block is still read right when that block closes in the window.
MAX_RESPONSE_CHARS = 131_072


def as_text(value: object) -> str | None:
    """The response's last ``MAX_RESPONSE_CHARS`` characters as ``str``, or None for non-text.

    Bytes are decoded leniently (only the tail is decoded).
    """
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value[-4 * MAX_RESPONSE_CHARS :]).decode("utf-8", errors="replace")
    if not isinstance(value, str):
        return None
    return value[-MAX_RESPONSE_CHARS:] if len(value) > MAX_RESPONSE_CHARS else value


def thinking_start(text: str, pos: int) -> int:
    """Where the think block holding ``pos`` starts, or -1 when ``pos`` is outside thinking.

    For the implicit block of a response that starts inside thinking, the start is 0.
    """
    last_open = text.rfind(THINK_OPEN, 0, pos)
    last_close = text.rfind(THINK_CLOSE, 0, pos)
    if last_open > last_close:
        return last_open
    if last_open == -1 and last_close == -1:
        first_open = text.find(THINK_OPEN, pos)
        first_close = text.find(THINK_CLOSE, pos)
        if first_close != -1 and (first_open == -1 or first_close < first_open):
            return 0
    return -1


def last_tagged(text: str, open_tag: str, close_tag: str) -> str | None:
    """Content of the last complete ``open_tag ... close_tag`` pair outside thinking, or None.

    A pair counts when its opening tag is outside thinking. An opening tag without a closing tag
    after it (a truncated answer) does not count.
    """
    end = len(text)
    for _ in range(MAX_CANDIDATES):
        close_at = text.rfind(close_tag, 0, end)
        if close_at == -1:
            return None
        open_at = text.rfind(open_tag, 0, close_at)
        if open_at == -1:
            return None
        block_start = thinking_start(text, open_at)
        if block_start == -1:
            return text[open_at + len(open_tag) : close_at]
        # Everything from the think block's start to here is thinking: skip it whole.
        end = block_start
    return None


def last_marker_tail(text: str, marker: str, tail_chars: int) -> str | None:
    """The ``tail_chars`` characters after the last ``marker`` outside thinking, or None."""
    end = len(text)
    for _ in range(MAX_CANDIDATES):
        at = text.rfind(marker, 0, end)
        if at == -1:
            return None
        block_start = thinking_start(text, at)
        if block_start == -1:
            start = at + len(marker)
            return text[start : start + tail_chars]
        end = block_start
    return None


def refuse_unknown_kwargs(kwargs: Mapping[str, Any], known: Mapping[str, Any], task: str) -> None:
    """ValueError naming the first reward kwarg not in ``known``, and the valid names."""
    unknown = [name for name in kwargs if name not in known]
    if unknown:
        raise ValueError(
            f"unknown reward kwarg {unknown[0]!r} for {task}; valid: {', '.join(known)}"
        )


class SettingsCache:
    """A reward's checked settings by kwargs (name, type, value): verl calls with the same kwargs
    every time, so ``check`` runs once per run and a call costs one small tuple and dict lookup."""

    def __init__(self, check: Callable[[dict[str, Any]], Any]) -> None:
        self._check = check
        self._found: dict[tuple[tuple[str, type, Any], ...], Any] = {}

    def __call__(self, kwargs: dict[str, Any]) -> Any:
        try:
            key = tuple((name, type(value), value) for name, value in kwargs.items())
            hash(key)
        except TypeError:  # an unhashable value (never a valid one): check without caching
            return self._check(kwargs)
        found = self._found.get(key)
        if found is None:
            found = self._check(kwargs)
            if len(self._found) > 64:
                self._found.clear()
            self._found[key] = found
        return found


def describe(value: object, limit: int = 80) -> str:
    """``repr(value)`` for an error message, shortened; never raises (``repr(10**5000)`` does)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # a message must not fail: whatever repr raises, name the type instead
        return f"a {type(value).__name__} value"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def unit_interval(value: object, name: str) -> float:
    """``value`` as a float in [0, 1], else ValueError naming ``name`` and the range.

    Compared before converting: ``float(10**400)`` raises OverflowError, and NaN is in no range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number in [0, 1], got {describe(value)}")
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must be in [0, 1], got {describe(value)}")
    return float(value)

"""GSM8K reward for verl: the output contract the prompt states, and the grader that reads it.

Usage (verl overrides):
    custom_reward_function.path=rewards/gsm8k.py custom_reward_function.name=compute_score

The model reasons step by step and ends with ``#### <number>`` outside any ``<think>`` block.
The answer is read from the last ``####`` outside thinking: optional ``$`` and sign, digits with
optional thousands commas, optional decimals; whatever follows the number is ignored
(``#### 72 apples`` reads 72, ``#### 72.`` reads 72). It is compared with the ground truth
exactly, as rationals (``72.00 == 72``).

``method="flexible"`` also accepts, when no ``####`` answer is present, the last ``\\boxed{...}``
and then the last "the answer is X".

=========================================  ==========================
response                                   score
=========================================  ==========================
no readable final answer                   0.0
final answer read, wrong value             ``format_score`` (default 0.0)
final answer read, equals ground truth     1.0
=========================================  ==========================

``answer_key`` names the answer a response gives (its final number, exactly), which eval's
maj@k votes on.

The ground truth is read by the same number grammar (``parse_ground_truth``), and data prep
reads the dataset's ``#### ...`` lines with that function too: a truth such as ``1,2,14`` or
``1e99999999`` is not a number here, so prep refuses it and the reward reports it as
``bad_ground_truth`` rather than grading against a different number.

Standard library only; never evaluates model text; never raises on any response or ground
truth. Reward kwargs are checked by name and value (``validate_reward_kwargs``, also run by
pre-flight and eval): an unknown or invalid one raises ValueError at the first call, since it is a
config bug that would otherwise change every score silently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from numbers import Rational
from typing import Any

from rewards import _text

# --- output contract -----------------------------------------------------------------------------

ANSWER_MARKER = "####"

#: Instruction appended to every GSM8K question (data prep and eval import this).
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'

#: Extra instruction for the `think` template.
THINK_INSTRUCTION = (
    'Reason inside <think> </think> tags, then write the final answer after "####" '
    "outside the tags."
)

METHODS = ("strict", "flexible")

# --- grading -------------------------------------------------------------------------------------

#: Characters after a marker that are searched for the number (a number and its unit fit).
_TAIL_CHARS = 64
#: Longest numeric string compared; longer ones are not answers GSM8K has.
MAX_NUMBER_CHARS = 32

_NUMBER = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]*)?|\.[0-9]+"
# Every pattern below reads each whitespace run with exactly one ``\s*``: a run of spaces must
# not split between several optional pieces in a row (``\s*(-)?\s*\$?\s*``), which makes a
# failing match try every split, ~n**4 steps for n spaces (60 ms for 64). Each optional piece
# carries the whitespace after it instead, and no piece starts with whitespace, so a match costs
# steps linear in its text.
# After "####": spaces, optional "$" (or "\$", or a lone "\") and sign in either order, then the
# number.
_SIGN_DOLLAR_SIGN = r"(?:(-)\s*)?(?:(?:\\\$?|\$)\s*)?(?:(-)\s*)?"
_AFTER_MARKER = re.compile(r"\s*" + _SIGN_DOLLAR_SIGN + r"(" + _NUMBER + r")")
_BOXED_OPEN = "\\boxed{"
_BOXED_NUMBER = re.compile(
    r"\s*(?:(-)\s*)?(?:\\?\$\s*)?(?:(-)\s*)?(" + _NUMBER + r")\s*(?:\\?%\s*)?"
    r"(?:\\text\{[^{}]*\}\s*)?\}"
)
_NUMBER_ONLY = re.compile(_NUMBER)
# A whole ground truth: an optional "####", then what a response's answer may say after its marker.
_GROUND_TRUTH = re.compile(r"\s*(?:####\s*)?" + _SIGN_DOLLAR_SIGN + r"(" + _NUMBER + r")\s*")
_MAX_GROUND_TRUTH_CHARS = 128
#: Largest decimal exponent of a non-text ground truth (a float's is at most 308).
_MAX_EXPONENT = 400
_ANSWER_IS = re.compile(r"the (?:final )?answer is\s*(?::\s*)?", re.IGNORECASE)
_SCAN_AFTER_ANSWER_IS = 4096


def parse_number(text: str) -> Fraction | None:
    """A GSM8K-style number ("1,000", "3.50", "72.", "$5") as an exact Fraction, or None.

    Only the answer grammar is accepted: commas between groups of three digits, no exponent, no
    sign (the callers read signs), at most ``MAX_NUMBER_CHARS`` characters.
    """
    cleaned = text.strip()
    cleaned = cleaned[1:].lstrip() if cleaned.startswith("$") else cleaned
    if len(cleaned) > MAX_NUMBER_CHARS + MAX_NUMBER_CHARS // 3 or not _NUMBER_ONLY.fullmatch(
        cleaned
    ):
        return None
    cleaned = cleaned.replace(",", "")
    if len(cleaned) > MAX_NUMBER_CHARS:
        return None
    return Fraction(cleaned[:-1] if cleaned.endswith(".") else cleaned)


def _signed(match: re.Match[str]) -> Fraction | None:
    value = parse_number(match.group(3))
    if value is None:
        return None
    negative = (match.group(1) is not None) != (match.group(2) is not None)
    return -value if negative else value


def extract_strict(text: str) -> Fraction | None:
    """The number after the last ``####`` outside thinking."""
    tail = _text.last_marker_tail(text, ANSWER_MARKER, _TAIL_CHARS)
    if tail is None:
        return None
    match = _AFTER_MARKER.match(tail)
    return _signed(match) if match else None


def extract_flexible(text: str) -> Fraction | None:
    """Strict first; else the last ``\\boxed{number}``; else the last "the answer is X"."""
    value = extract_strict(text)
    if value is not None:
        return value
    tail = _text.last_marker_tail(text, _BOXED_OPEN, _TAIL_CHARS)
    if tail is not None:
        match = _BOXED_NUMBER.match(tail)
        if match:
            return _signed(match)
    # "the answer is" is matched case-insensitively, so only the response's end is searched, and
    # only its last occurrence counts (when it is outside thinking).
    last = None
    for last in _ANSWER_IS.finditer(text, max(0, len(text) - _SCAN_AFTER_ANSWER_IS)):  # noqa: B007
        pass
    if last is None or _text.thinking_start(text, last.start()) != -1:
        return None
    match = _AFTER_MARKER.match(text, last.end(), last.end() + _TAIL_CHARS)
    return _signed(match) if match else None


def parse_ground_truth(ground_truth: Any) -> Fraction | None:
    """The reference answer, or None when it is not one: a number, or text that is wholly a
    number as a response's final answer is read (``#### 1,000``, ``-3.5``, ``$5``).

    Data prep uses this same function on the dataset's answers, so prep and grading agree.
    """
    if isinstance(ground_truth, (bytes, bytearray)):
        if len(ground_truth) > 4 * _MAX_GROUND_TRUTH_CHARS:
            return None
        ground_truth = bytes(ground_truth).decode("utf-8", errors="replace")
    if isinstance(ground_truth, str):
        if len(ground_truth) > _MAX_GROUND_TRUTH_CHARS:
            return None
        match = _GROUND_TRUTH.fullmatch(ground_truth)
        return _signed(match) if match else None
    try:
        return _number_value(ground_truth)
    except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError):
        return None


def _number_value(ground_truth: Any) -> Fraction | None:
    """A non-text ground truth (int, float, numpy scalar, Decimal) as the number it writes.

    A float is read as its shortest decimal text, as Parquet and the dataset wrote it: 0.1 is 1/10,
    not the binary double nearest it (0.1000000000000000055...), and numpy's float32 2.3 is 23/10.
    """
    is_numpy = hasattr(ground_truth, "item")
    value = ground_truth.item() if is_numpy else ground_truth
    if isinstance(value, bool) or isinstance(ground_truth, bool):
        return None
    if isinstance(value, str):  # a numpy string array of one element
        return parse_ground_truth(value)
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, Rational):
        return Fraction(value)
    if not isinstance(value, Decimal):
        if not (isinstance(value, float) or is_numpy):
            return None
        # str() of the numpy scalar: numpy writes a float32 at its own precision ("2.3"), and a
        # longdouble (whose item() is itself) too.
        text = str(ground_truth) if is_numpy else float.__repr__(value)
        if len(text) > _MAX_GROUND_TRUTH_CHARS:
            return None
        value = Decimal(text)
    # Fraction(Decimal("1e999999999")) would build a billion-digit integer.
    if not value.is_finite() or abs(value.adjusted()) > _MAX_EXPONENT:
        return None
    return Fraction(value)


#: The reward kwargs (``custom_reward_function.reward_kwargs``) and their defaults.
REWARD_KWARGS: dict[str, Any] = {"method": "strict", "format_score": 0.0}


def validate_reward_kwargs(kwargs: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first unknown or invalid reward kwarg (and the valid names)."""
    _settings(kwargs)


def _settings(kwargs: Mapping[str, Any]) -> tuple[str, float]:
    _text.refuse_unknown_kwargs(kwargs, REWARD_KWARGS, "gsm8k")
    method = kwargs.get("method", REWARD_KWARGS["method"])
    format_score = kwargs.get("format_score", REWARD_KWARGS["format_score"])
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(
            f"gsm8k reward: method must be one of {METHODS}, got {_text.describe(method)}"
        )
    return method, _text.unit_interval(format_score, "gsm8k reward: format_score")


_cached_settings = _text.SettingsCache(_settings)  # checked once per distinct kwargs


def _result(score: float, fmt: bool, correct: bool, bad_gt: bool) -> dict[str, float]:
    return {
        "score": float(score),
        "format": float(fmt),
        "correct": float(correct),
        "acc": float(correct),
        "bad_ground_truth": float(bad_gt),
    }


def compute_score(
    data_source: Any = None,
    solution_str: Any = "",
    ground_truth: Any = None,
    extra_info: Any = None,
    **kwargs: Any,
) -> dict[str, float]:
    """Score one response. verl calls this once per response, with ``reward_kwargs`` as
    ``kwargs`` (see ``REWARD_KWARGS``; anything else raises ValueError).

    ``data_source`` and ``extra_info`` never change the score.
    """
    method, format_score = _cached_settings(kwargs)
    text = _text.as_text(solution_str)
    if text is None:
        return _result(0.0, False, False, False)
    predicted = extract_strict(text) if method == "strict" else extract_flexible(text)
    if predicted is None:
        return _result(0.0, False, False, False)
    truth = parse_ground_truth(ground_truth)
    if truth is None:
        return _result(0.0, True, False, True)
    if predicted == truth:
        return _result(1.0, True, True, False)
    return _result(format_score, True, False, False)


def answer_key(solution_str: Any = "", ground_truth: Any = None, **kwargs: Any) -> str | None:
    """The answer a response gives, for majority voting (eval's maj@k): the final number read as
    ``compute_score`` reads it (``method`` from ``kwargs``, the reward kwargs), written exactly as
    ``str(Fraction)`` (``"72"``, ``"-7/2"``; so ``72.00``, ``$72`` and ``72`` are one answer), or
    None when no final answer is read.

    Keys compare exactly as the grader does: with a readable ground truth, a response's key is
    ``str(parse_ground_truth(ground_truth))`` exactly when ``compute_score`` gives it 1.0. The
    ground truth does not change the key.
    """
    method, _ = _cached_settings(kwargs)
    text = _text.as_text(solution_str)
    if text is None:
        return None
    predicted = extract_strict(text) if method == "strict" else extract_flexible(text)
    return None if predicted is None else str(predicted)

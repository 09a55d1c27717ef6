"""Countdown reward for verl: the output contract the prompt states, and the grader that reads it.

Usage (verl overrides):
    custom_reward_function.path=rewards/countdown.py custom_reward_function.name=compute_score

The model must put one arithmetic expression inside ``<answer>...</answer>``, outside any
``<think>`` block. The expression uses every given number exactly once, integer literals in
plain decimal digits, binary ``+ - * /`` and parentheses. Unary minus/plus is not allowed
(Countdown's own rules combine numbers with binary operations only, and data prep's generator
and solver follow the same grammar). The value is computed exactly over the rationals.

Scores (kwargs come from ``custom_reward_function.reward_kwargs``):

====================================  =========================================
response                              score
====================================  =========================================
no complete answer outside thinking   0.0
answer present, invalid expression    ``format_score`` (default 0.1)
valid expression, wrong value         ``format_score``, or with ``shaping=True``
                                      ``format_score + (1 - format_score) / (1 + |value - target|)``
valid expression, exact target        1.0
====================================  =========================================

``answer_key`` names the answer a response gives (its expression's exact value), which eval's
maj@k votes on.

Standard library only; never evaluates model text; never raises on any response or ground
truth. Reward kwargs are checked by name and value (``validate_reward_kwargs``, also run by
pre-flight and eval): an unknown or invalid one raises ValueError at the first call, since it is a
config bug that would otherwise change every score silently.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from rewards import _text

# --- output contract: the text the prompt shows, next to the parser that grades it -------------

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"

#: Rules stated in every Countdown prompt (data prep and eval import this).
RULES = (
    "You may use +, -, *, / and parentheses, and each number must be used exactly once. "
    "Put ONLY the final expression inside <answer> </answer> tags, for example "
    "<answer>(1 + 2) / 3</answer>."
)

#: Extra instruction for the `think` template (Qwen3-style reasoning before the answer).
THINK_INSTRUCTION = "Show your reasoning in <think> </think> tags, then give the final answer."

#: The few-shot example of TuFT's Countdown RL guide (github.com/agentscope-ai/TuFT,
#: docs/sphinx_doc/source/user-guide/countdown-rl.md), prepended by the `fewshot` template.
FEWSHOT_EXAMPLE = (
    "Q: Using the numbers 2, 3, 7, reach the target number 13. " + RULES + "\n"
    "A: <answer>(2 * 3) + 7</answer>"
)


def task_text(numbers: Iterable[int], target: int) -> str:
    """The problem statement for one task, with the contract's rules."""
    listed = ", ".join(str(int(n)) for n in numbers)
    return f"Using the numbers {listed}, reach the target number {int(target)}. {RULES}"


def compact_task_text(numbers: Iterable[int], target: int) -> str:
    """The same task and rules in one short sentence (the ``compact`` template): 63 prompt tokens
    with SmolLM2's chat template against ``task_text``'s 103, for the small CPU recipe, where
    every stage computes the prompt and the SFT warm start teaches the format by example."""
    listed = ", ".join(str(int(n)) for n in numbers)
    return (
        f"Use {listed} once each with + - * / to make {int(target)}. "
        f"Answer in {ANSWER_OPEN} {ANSWER_CLOSE} tags."
    )


# --- grading ------------------------------------------------------------------------------------

#: Longest answer (characters) that is parsed; longer ones are invalid. Real answers for up to six
#: numbers are well under 100 characters.
MAX_ANSWER_CHARS = 512
#: Ground truths outside these bounds are reported as bad (``bad_ground_truth``), not graded.
MAX_NUMBERS = 16
MAX_MAGNITUDE = 10**9
#: Deepest parenthesis nesting accepted; deeper is invalid (keeps recursion bounded).
MAX_DEPTH = 32
#: Longest ground truth given as JSON text that is read (a real one is under 300 characters).
MAX_GROUND_TRUTH_CHARS = 4096

_ALLOWED = re.compile(r"[0-9+\-*/() \t\r\n]*")
_TOKEN = re.compile(r"[0-9]+|[-+*/()]")


class _Invalid(Exception):
    """The expression is outside the grammar or breaks the number rule."""


def _tokenize(expr: str) -> list[str]:
    if not _ALLOWED.fullmatch(expr):
        raise _Invalid("character outside digits, + - * / ( ) and spaces")
    tokens = _TOKEN.findall(expr)
    if not tokens:
        raise _Invalid("empty expression")
    return tokens


class _Parser:
    """Recursive descent over tokens; values are exact fractions as (numerator, denominator).

    Literals are checked against the allowed multiset *before* any arithmetic, so the arithmetic
    only ever sees the task's own (small) numbers: no exponent bombs, no huge literals.
    """

    def __init__(self, tokens: list[str], available: Counter[str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.available = available

    def parse(self) -> tuple[int, int]:
        value = self._expr(0)
        if self.pos != len(self.tokens):
            raise _Invalid(f"unexpected {self.tokens[self.pos]!r}")
        if any(self.available.values()):
            raise _Invalid("not every number used")
        return value

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _expr(self, depth: int) -> tuple[int, int]:
        num, den = self._term(depth)
        while (op := self._peek()) in ("+", "-"):
            self.pos += 1
            rnum, rden = self._term(depth)
            num = num * rden + rnum * den if op == "+" else num * rden - rnum * den
            den = den * rden
        return num, den

    def _term(self, depth: int) -> tuple[int, int]:
        num, den = self._factor(depth)
        while (op := self._peek()) in ("*", "/"):
            self.pos += 1
            rnum, rden = self._factor(depth)
            if op == "*":
                num, den = num * rnum, den * rden
            else:
                if rnum == 0:
                    raise _Invalid("division by zero")
                num, den = num * rden, den * rnum
        return num, den

    def _factor(self, depth: int) -> tuple[int, int]:
        token = self._peek()
        if token is None:
            raise _Invalid("expression ends early")
        self.pos += 1
        if token == "(":
            if depth >= MAX_DEPTH:
                raise _Invalid("parentheses nested too deep")
            value = self._expr(depth + 1)
            if self._peek() != ")":
                raise _Invalid("unbalanced parentheses")
            self.pos += 1
            return value
        if token[0].isdigit():
            if self.available[token] <= 0:
                # Covers reuse, numbers not given, and non-canonical literals such as "07".
                raise _Invalid(f"number {token} not available")
            self.available[token] -= 1
            return int(token), 1
        raise _Invalid(f"unexpected {token!r}")  # unary operators, ")" out of place


def evaluate(expr: str, numbers: Iterable[int]) -> tuple[int, int] | None:
    """Exact value of ``expr`` as (numerator, denominator), or None when it is invalid.

    Valid means: within the grammar, within the size limits, every number in ``numbers`` used
    exactly once, and no division by zero. The denominator may be negative; compare with
    ``num == target * den``.
    """
    if len(expr) > MAX_ANSWER_CHARS:
        return None
    try:
        tokens = _tokenize(expr)
        available = Counter(str(int(n)) for n in numbers)
        return _Parser(tokens, available).parse()
    except _Invalid:
        return None


def task_problem(numbers: Sequence[int], target: int) -> str | None:
    """Why a task is outside what this reward grades, or None when it is inside.

    The one definition of the bounds: ``parse_ground_truth`` applies it to every ground truth, and
    data prep applies it to every task it would write (a task it lets through is gradable).
    """
    if not 0 < len(numbers) <= MAX_NUMBERS:
        return f"{len(numbers)} numbers; the reward grades tasks of 1 to {MAX_NUMBERS} numbers"
    for number in numbers:
        if not 0 <= number < MAX_MAGNITUDE:
            return f"number {number} is outside the graded range 0 to {MAX_MAGNITUDE - 1:,}"
    if abs(target) >= MAX_MAGNITUDE:
        return f"target {target} is outside the graded range +-{MAX_MAGNITUDE - 1:,}"
    return None


def parse_ground_truth(ground_truth: Any) -> tuple[int, list[int]] | None:
    """``(target, numbers)`` from the data prep dict (numpy values and JSON text accepted)."""
    try:
        if isinstance(ground_truth, (str, bytes, bytearray)):
            if len(ground_truth) > MAX_GROUND_TRUTH_CHARS:
                return None
            ground_truth = json.loads(ground_truth)
        target = _as_int(ground_truth["target"])
        raw_numbers = ground_truth["numbers"]
        if isinstance(raw_numbers, (str, bytes)) or not hasattr(raw_numbers, "__iter__"):
            return None
        if hasattr(raw_numbers, "__len__") and len(raw_numbers) > MAX_NUMBERS:
            return None  # before converting them: a huge list costs nothing
        # At most one past the limit is read, so even an endless iterator costs nothing.
        numbers = [_as_int(n) for n in itertools.islice(raw_numbers, MAX_NUMBERS + 1)]
    except (
        KeyError,
        TypeError,
        ValueError,  # json.JSONDecodeError and UnicodeDecodeError included
        IndexError,
        AttributeError,
        ArithmeticError,  # OverflowError (int(inf)), decimal.InvalidOperation
        RecursionError,  # JSON text nested deeper than the interpreter's recursion limit
        MemoryError,
    ):
        return None
    if len(numbers) > MAX_NUMBERS or task_problem(numbers, target) is not None:
        return None
    return target, numbers


def _as_int(value: Any) -> int:
    """An exact integer from int, numpy integer, or integral float; anything else is an error."""
    if isinstance(value, bool):
        raise ValueError("bool is not a number")
    # Out of range is bad anyway (task_problem); checked before int(), since
    # int(Decimal("1e999999999")) builds a billion-digit integer. A NaN fails the comparison too.
    if not isinstance(value, int) and not abs(value) < MAX_MAGNITUDE:
        raise ValueError(f"{type(value).__name__} out of range")
    as_int = int(value)
    if as_int != value:
        raise ValueError("not an integer")
    return as_int


#: The reward kwargs (``custom_reward_function.reward_kwargs``) and their defaults.
REWARD_KWARGS: dict[str, Any] = {"format_score": 0.1, "shaping": False}


def validate_reward_kwargs(kwargs: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first unknown or invalid reward kwarg (and the valid names)."""
    _settings(kwargs)


def _settings(kwargs: Mapping[str, Any]) -> tuple[float, bool]:
    _text.refuse_unknown_kwargs(kwargs, REWARD_KWARGS, "countdown")
    format_score = kwargs.get("format_score", REWARD_KWARGS["format_score"])
    shaping = kwargs.get("shaping", REWARD_KWARGS["shaping"])
    checked = _text.unit_interval(format_score, "countdown reward: format_score")
    if not isinstance(shaping, bool):
        raise ValueError(
            f"countdown reward: shaping must be true or false, got {_text.describe(shaping)}"
        )
    return checked, shaping


_cached_settings = _text.SettingsCache(_settings)  # checked once per distinct kwargs


def _result(score: float, fmt: bool, valid: bool, correct: bool, bad_gt: bool) -> dict[str, float]:
    return {
        "score": float(score),
        "format": float(fmt),
        "valid": float(valid),
        "correct": float(correct),
        # verl reports `acc` as the core validation metric when a reward returns it.
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
    format_score, shaping = _cached_settings(kwargs)
    text = _text.as_text(solution_str)
    answer = _text.last_tagged(text, ANSWER_OPEN, ANSWER_CLOSE) if text is not None else None
    if answer is None:
        return _result(0.0, False, False, False, False)
    truth = parse_ground_truth(ground_truth)
    if truth is None:
        return _result(0.0, True, False, False, True)
    target, numbers = truth
    value = evaluate(answer.strip(), numbers)
    if value is None:
        return _result(format_score, True, False, False, False)
    num, den = value
    if num == target * den:
        return _result(1.0, True, True, True, False)
    if not shaping:
        return _result(format_score, True, True, False, False)
    try:
        error = abs(num - target * den) / abs(den)
    except OverflowError:
        error = float("inf")
    shaped = format_score + (1.0 - format_score) / (1.0 + error)
    # A value within float rounding of the target must still not reach the correct score.
    return _result(min(shaped, 1.0 - 1e-9), True, True, False, False)


def answer_key(solution_str: Any = "", ground_truth: Any = None, **kwargs: Any) -> str | None:
    """The answer a response gives, for majority voting (eval's maj@k): the exact value of its
    expression as a reduced fraction (``"13"``, ``"-7/2"``, as ``str(Fraction)`` writes it), or
    None when the grader finds no valid expression (no answer, an invalid one, or a bad ground
    truth, whose numbers are unknown).

    Keys are values, so every correct expression votes for the same answer, ``str(target)``: a
    response's key is that exactly when ``compute_score`` gives it 1.0. ``kwargs`` are the reward
    kwargs, checked as ``compute_score`` checks them; they do not change the key.
    """
    _cached_settings(kwargs)
    text = _text.as_text(solution_str)
    answer = _text.last_tagged(text, ANSWER_OPEN, ANSWER_CLOSE) if text is not None else None
    truth = parse_ground_truth(ground_truth) if answer is not None else None
    if answer is None or truth is None:
        return None
    value = evaluate(answer.strip(), truth[1])
    # Fraction reduces and moves the sign to the numerator: 26/2, -13/-1 and 13 are one answer.
    return None if value is None else str(Fraction(*value))

"""GSM8K reward: answer extraction (strict and flexible), numeric comparison, adversarial input."""

from __future__ import annotations

import time
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards.gsm8k import (
    _AFTER_MARKER,
    _BOXED_NUMBER,
    _GROUND_TRUTH,
    answer_key,
    compute_score,
    extract_flexible,
    extract_strict,
    parse_ground_truth,
    validate_reward_kwargs,
)

# (case id, response, ground truth, strict score, flexible score)
CASES = [
    ("plain", "5 + 67 = 72\n#### 72", "72", 1.0, 1.0),
    ("trailing period", "#### 72.", "72", 1.0, 1.0),
    ("decimal zeros", "#### 72.00", "72", 1.0, 1.0),
    ("no space", "####72", "72", 1.0, 1.0),
    ("dollar", "#### $72", "72", 1.0, 1.0),
    ("escaped dollar", "#### \\$72", "72", 1.0, 1.0),
    ("thousands comma", "#### 1,000", "1000", 1.0, 1.0),
    ("comma in truth", "#### 1000", "1,000", 1.0, 1.0),
    ("unit after", "#### 72 apples", "72", 1.0, 1.0),
    ("sentence after", "#### 72\nI hope this helps! The end.", "72", 1.0, 1.0),
    ("negative", "#### -5", "-5", 1.0, 1.0),
    ("negative dollar", "#### -$5", "-5", 1.0, 1.0),
    ("dollar negative", "#### $-5", "-5", 1.0, 1.0),
    ("decimal", "#### 3.25", "3.25", 1.0, 1.0),
    ("leading dot", "#### .5", "0.5", 1.0, 1.0),
    ("percent", "#### 25%", "25", 1.0, 1.0),
    ("last marker wins", "#### 71\nwait, recheck\n#### 72", "72", 1.0, 1.0),
    ("last marker wins wrong", "#### 72\nwait\n#### 71", "72", 0.0, 0.0),
    ("marker in think ignored", "<think>#### 72</think>#### 71", "72", 0.0, 0.0),
    ("only in think", "<think>so #### 72</think> done", "72", 0.0, 0.0),
    ("only in unclosed think", "<think>#### 72", "72", 0.0, 0.0),
    ("after think", "<think>5+67</think>#### 72", "72", 1.0, 1.0),
    ("orphan close", "#### 71 </think> #### 72", "72", 1.0, 1.0),
    ("wrong value", "#### 73", "72", 0.0, 0.0),
    ("no marker", "The total is 72.", "72", 0.0, 0.0),
    ("marker without number", "#### seventy-two", "72", 0.0, 0.0),
    ("comma is not decimal", "#### 72,5", "72", 1.0, 1.0),
    ("not thousands grouping", "#### 1,00", "1", 1.0, 1.0),
    ("boxed", "so \\boxed{72}", "72", 0.0, 1.0),
    ("boxed dollar", "so \\boxed{\\$72}", "72", 0.0, 1.0),
    ("boxed text unit", "\\boxed{72 \\text{apples}}", "72", 0.0, 1.0),
    ("boxed in think", "<think>\\boxed{72}</think>", "72", 0.0, 0.0),
    ("answer is", "So the answer is 72.", "72", 0.0, 1.0),
    ("answer is colon", "The final answer is: $1,000", "1000", 0.0, 1.0),
    ("answer is in think", "<think>the answer is 72</think>", "72", 0.0, 0.0),
    ("marker beats boxed", "\\boxed{71}\n#### 72", "72", 1.0, 1.0),
    ("expression is not a number", "#### 70+2", "72", 0.0, 0.0),
    ("empty", "", "72", 0.0, 0.0),
]


@pytest.mark.parametrize(
    ("response", "truth", "strict", "flexible"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_table(response: str, truth: str, strict: float, flexible: float) -> None:
    assert compute_score("openai/gsm8k", response, truth)["score"] == strict
    assert compute_score("openai/gsm8k", response, truth, method="flexible")["score"] == flexible


def test_format_score_for_readable_wrong_answer() -> None:
    assert compute_score("x", "#### 73", "72", format_score=0.1)["score"] == 0.1
    assert compute_score("x", "no answer", "72", format_score=0.1)["score"] == 0.0
    parts = compute_score("x", "#### 73", "72")
    assert (parts["format"], parts["correct"], parts["acc"]) == (1.0, 0.0, 0.0)


@pytest.mark.parametrize(
    "truth",
    ["72", " 72 ", "72.0", "#### 72", 72, 72.0, np.int64(72), np.float32(72.0), np.str_("72")],
)
def test_ground_truth_forms(truth: object) -> None:
    assert compute_score("x", "#### 72", truth)["score"] == 1.0


@pytest.mark.parametrize(
    "truth",
    [None, "", "abc", [72], {"a": 1}, True, "9" * 100, "1,2,14", "72 apples", "1e3", "nan"],
)
def test_bad_ground_truth_reported(truth: object) -> None:
    """Not a number as a response's answer is read: reported, never graded against a different
    number (``1,2,14`` used to become 1214)."""
    result = compute_score("x", "#### 72", truth)
    assert result["score"] == 0.0 and result["bad_ground_truth"] == 1.0


@pytest.mark.parametrize(
    "truth",
    ["1e99999999", "9" * 31 + "e9999999", "1" * 10_000_000],
    ids=["exponent", "long exponent", "10M digits"],
)
def test_huge_ground_truths_are_refused_fast(truth: str) -> None:
    """An exponent used to build a 10**99999999 Fraction: seconds per call."""
    start = time.perf_counter()
    assert parse_ground_truth(truth) is None
    assert compute_score("x", "#### 1", truth)["bad_ground_truth"] == 1.0
    assert time.perf_counter() - start < 0.05


@pytest.mark.parametrize(
    ("truth", "response"),
    [
        (0.1, "#### 0.1"),  # Fraction(0.1) is the binary double 3602879701896397/2**55
        (2.3, "#### 2.3"),
        (np.float32(2.3), "#### 2.3"),  # float32 2.3 is 2.2999999523...
        (np.float64(0.1), "#### 0.1"),
        (np.float16(0.5), "#### .5"),
        (-3.25, "#### -3.25"),
        (1e20, "#### 100,000,000,000,000,000,000"),
        (np.array(0.1), "#### 0.1"),
        (Decimal("0.1"), "#### 0.1"),
        (Fraction(1, 10), "#### 0.1"),
        (np.array(["72"]), "#### 72"),
    ],
)
def test_float_ground_truth_is_its_decimal_text(truth: object, response: str) -> None:
    """verl's ground truth comes from Parquet: a float column gives float or numpy values."""
    assert compute_score("x", response, truth)["score"] == 1.0
    assert answer_key(response) == str(parse_ground_truth(truth))


@pytest.mark.parametrize(
    "truth",
    [
        float("nan"),
        float("inf"),
        np.float32("inf"),
        np.bool_(True),
        Decimal("1e999999999"),  # Fraction() of it would build a billion-digit integer
        Decimal("1e-999999999"),
        Decimal("NaN"),
        Decimal("sNaN"),
        np.array([1.0, 2.0]),
        np.datetime64("2020-01-01"),
        complex(72, 0),
        b"\xff\xfe",
        b"7" * 10_000_000,
        np.longdouble("1e4000"),
    ],
)
def test_hostile_non_text_ground_truth_is_bad_fast(truth: object) -> None:
    start = time.process_time()
    result = compute_score("x", "#### 72", truth)
    assert time.process_time() - start < 0.05
    assert result["bad_ground_truth"] == 1.0 and result["score"] == 0.0


def test_parse_helpers() -> None:
    assert extract_strict("#### -1,234.50 dollars") == Fraction("-1234.5")
    assert extract_flexible("x \\boxed{-3}") == -3
    assert parse_ground_truth("-1,000") == -1000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"method": "loose"},
        {"format_score": 2},
        {"format_score": "0"},
        {"format_score": 10**400},  # float() of it raised OverflowError
        {"format_score": -(10**400)},
        {"format_score": 10**5000},  # str() of it raises ValueError (int digit limit)
        {"format_score": float("nan")},
        {"method": "x" * 10**6},
    ],
)
def test_bad_kwargs_fail_loudly(kwargs: dict) -> None:
    (name,) = kwargs
    pattern = rf"gsm8k reward: {name} must be (a number )?(in \[0, 1\]|one of .*), got "
    with pytest.raises(ValueError, match=pattern):
        compute_score("x", "#### 72", "72", **kwargs)
    with pytest.raises(ValueError, match=pattern) as raised:
        validate_reward_kwargs(kwargs)
    assert len(str(raised.value)) < 200  # the value is shortened, not printed whole


def test_data_source_does_not_matter() -> None:
    scores = {
        compute_score(ds, "#### 72", "72")["score"] for ds in ("openai/gsm8k", "countdown", None)
    }
    assert scores == {1.0}


ONE_MB = 1_000_000
ADVERSARIAL = {
    "1MB markers": "####" * (ONE_MB // 4),
    "1MB digits after marker": "#### " + "9" * ONE_MB,
    "1MB commas": "#### " + "1," * (ONE_MB // 2),
    "1MB answer-is": "the answer is " * (ONE_MB // 14),
    "1MB boxed": "\\boxed{" * (ONE_MB // 7),
    "1MB think opens": "<think>" * (ONE_MB // 7) + "#### 72",
    "1MB plus": "+" * ONE_MB,
    "1MB unicode digits": "#### " + "٣" * ONE_MB,
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_fast(name: str) -> None:
    text = ADVERSARIAL[name]
    best = float("inf")
    for method in ("strict", "flexible"):
        for _ in range(3):
            start = time.perf_counter()
            result = compute_score("x", text, "72", method=method)
            best = min(best, time.perf_counter() - start)
            assert 0.0 <= result["score"] <= 1.0
    assert best < 0.05


@settings(max_examples=300, deadline=None)
@given(st.integers(-(10**9), 10**9), st.integers(0, 99), st.sampled_from(["", "$", " $"]))
def test_number_round_trip(whole: int, cents: int, prefix: str) -> None:
    value = Fraction(whole) + (Fraction(cents, 100) if whole >= 0 else -Fraction(cents, 100))
    sign = "-" if value < 0 else ""
    formatted = f"{abs(value.numerator) // value.denominator:,}.{cents:02d}"
    response = f"work...\n####{prefix}{sign}{formatted} units"
    truth = f"{sign}{formatted.replace(',', '')}"  # as data prep writes it: plain decimal digits
    assert compute_score("x", response, truth)["score"] == 1.0


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_never_raises(text: str) -> None:
    for method in ("strict", "flexible"):
        for wrapped in (text, "#### " + text, "<think>" + text + "</think>#### " + text):
            assert 0.0 <= compute_score("x", wrapped, "72", method=method)["score"] <= 1.0


@pytest.mark.parametrize("kwargs", [{"formt_score": 0.1}, {"method": "strict", "mode": "x"}])
def test_unknown_kwargs_fail_loudly_naming_the_valid_ones(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=r"unknown reward kwarg '\w+' for gsm8k; valid: method"):
        compute_score("x", "#### 72", "72", **kwargs)
    with pytest.raises(ValueError, match="valid: method, format_score"):
        validate_reward_kwargs(kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"method": "flexible"}, {"format_score": 0.5}])
def test_valid_kwargs_pass(kwargs: dict) -> None:
    validate_reward_kwargs(kwargs)  # the negative control
    assert compute_score("x", "#### 72", "72", **kwargs)["score"] == 1.0


# --- answer_key: what maj@k votes on --------------------------------------------------------------


def _agrees(response: object, truth: object, **kwargs: object) -> None:
    """The vote key and the grader agree: the key is the truth's exactly when the score is 1."""
    key = answer_key(response, truth, **kwargs)
    result = compute_score("x", response, truth, **kwargs)
    value = parse_ground_truth(truth)
    truth_key = None if value is None else str(value)
    assert (key is not None and key == truth_key) == (result["score"] == 1.0), (response, key)
    assert (key is not None) == (result["format"] == 1.0)  # abstains exactly when unread


@pytest.mark.parametrize(("response", "truth"), [c[1:3] for c in CASES], ids=[c[0] for c in CASES])
def test_answer_key_agrees_with_the_grader_on_the_table(response: str, truth: str) -> None:
    for method in ("strict", "flexible"):
        _agrees(response, truth, method=method)
        _agrees(response, truth, method=method, format_score=0.5)


def test_answer_key_is_the_number() -> None:
    keys = {answer_key(r) for r in ("#### 72", "#### 72.00", "#### $72", "####72 apples")}
    assert keys == {"72"}  # one answer, however it is written
    assert answer_key("#### 1,000") == answer_key("#### 1000") == "1000"
    assert answer_key("#### 3.50") == "7/2" and answer_key("#### -$5") == "-5"
    assert answer_key("#### 73") != answer_key("#### 72")
    assert answer_key("so \\boxed{72}") is None  # strict reads no answer: abstains
    assert answer_key("so \\boxed{72}", method="flexible") == "72"
    for abstains in ("", "The total is 72.", "<think>#### 72</think>", None, 72):
        assert answer_key(abstains) is None
    assert answer_key("#### 72", "not a number") == "72"  # the truth does not change the key
    with pytest.raises(ValueError, match="gsm8k reward"):
        answer_key("#### 72", "72", method="loose")  # checked as compute_score does


@settings(max_examples=300, deadline=None)
@given(
    st.integers(-(10**9), 10**9),
    st.integers(0, 99),
    st.sampled_from(["", "$", " $"]),
    st.integers(-2, 2),
)
def test_answer_key_agrees_with_the_grader(whole: int, cents: int, prefix: str, off: int) -> None:
    response = f"work...\n####{prefix}{whole:,}.{cents:02d} units"
    truth = f"{whole + off}.{cents:02d}"
    for method in ("strict", "flexible"):
        _agrees(response, truth, method=method)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_answer_key_never_raises_and_agrees_on_any_text(text: str) -> None:
    for method in ("strict", "flexible"):
        for wrapped in (text, "#### " + text, "the answer is " + text, "\\boxed{" + text):
            _agrees(wrapped, "72", method=method)


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_answer_key_adversarial_fast(name: str) -> None:
    best = float("inf")
    for method in ("strict", "flexible"):
        for _ in range(3):
            start = time.perf_counter()
            answer_key(ADVERSARIAL[name], "72", method=method)
            best = min(best, time.perf_counter() - start)
    assert best < 0.05


# --- whitespace runs: every regex reads one in linear time ----------------------------------------
#
# A run of n spaces that several optional ``\s*`` pieces in a row could split cost ~n**4 steps when
# the match then failed: 60 ms at 64 spaces (the marker tail's length), 17 s for a 128-character
# ground truth. Each row is timed at growing n, up to 10,000 (the patterns alone, past the windows
# the callers cut), against a budget linear in n that is generous for a linear match (5 ms plus
# 2 us per space, CPU, per call as a mean over 10; every row takes well under 1 ms up to n = 1,000):
# a super-linear regression blows it at a small n, before it gets slow.

_WS_SIZES = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 1_000, 10_000)

# id -> a call on a run of n spaces (the reviewer's inputs first: "#### ", "\\boxed{", a truth)
_WS_CALLS = {
    "strict marker then spaces": lambda ws: compute_score("x", "#### " + ws, "72"),
    "strict marker then newlines": lambda ws: compute_score(
        "x", "####" + ws.replace(" ", "\n"), "72"
    ),
    "strict marker spaces sign spaces": lambda ws: compute_score("x", "####" + ws + "-" + ws, "72"),
    "strict dollar spaces": lambda ws: compute_score("x", "#### $" + ws + "-" + ws + "x", "72"),
    "flexible boxed then spaces": lambda ws: compute_score(
        "x", "\\boxed{" + ws, "72", method="flexible"
    ),
    "flexible boxed number spaces": lambda ws: compute_score(
        "x", "\\boxed{5" + ws + "%" + ws + "x", "72", method="flexible"
    ),
    "flexible answer is spaces": lambda ws: compute_score(
        "x", "the answer is" + ws + ":" + ws, "72", method="flexible"
    ),
    "answer_key marker then spaces": lambda ws: answer_key("#### " + ws),
    "truth spaces then x": lambda ws: parse_ground_truth(ws + "x"),
    "truth marker spaces sign spaces": lambda ws: parse_ground_truth("####" + ws + "-" + ws + "x"),
    "truth number then spaces": lambda ws: parse_ground_truth("72" + ws + "x"),
    "truth as bytes": lambda ws: parse_ground_truth((ws + "x").encode()),
    "score against spaces truth": lambda ws: compute_score("x", "#### 72", ws[:100] + "x"),
    # The patterns themselves, past the 64- and 128-character windows the callers cut.
    "after-marker pattern": lambda ws: _AFTER_MARKER.match(ws + "-" + ws + "$" + ws),
    "boxed pattern": lambda ws: _BOXED_NUMBER.match(ws + "-" + ws + "5" + ws + "%" + ws),
    "ground-truth pattern": lambda ws: _GROUND_TRUTH.fullmatch(ws + "####" + ws + "-" + ws + "x"),
}


@pytest.mark.parametrize("name", list(_WS_CALLS))
def test_whitespace_runs_cost_linear_time(name: str) -> None:
    call = _WS_CALLS[name]
    for n in _WS_SIZES:  # smallest first, 1.5x steps: a regression fails before it gets slow
        spaces = " " * n
        budget = 0.005 + 2e-6 * n
        best = float("inf")
        for _ in range(3):  # retried only when over the bound
            start = time.process_time()
            for _ in range(10):
                call(spaces)
            best = min(best, (time.process_time() - start) / 10)
            if best < budget:
                break
        assert best < budget, f"{name}: {best * 1000:.2f} ms CPU per call at {n} spaces"


def test_whitespace_rewrite_reads_what_it_read() -> None:
    """Spaces are still allowed wherever they were (the patterns were rewritten, not narrowed)."""
    assert extract_strict("####  -  \\$  72") == -72
    assert extract_strict("#### $ - 72") == -72 and extract_strict("#### - $ - 72") == 72
    assert extract_strict("####\t\\ 72") == 72  # a lone backslash, as before
    assert extract_flexible("\\boxed{ - \\$ 7 \\% \\text{ apples } }") == -7
    assert extract_flexible("the answer is \n : \n 72") == 72
    assert parse_ground_truth("  ####  -  $  1,000  ") == -1000
    assert parse_ground_truth(" " * 100 + "72") == 72

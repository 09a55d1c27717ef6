"""Countdown reward: the contract, every rejected trick, adversarial inputs, and properties."""

from __future__ import annotations

import itertools
import random
import time
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rewards import countdown
from rewards.countdown import compute_score, evaluate, validate_reward_kwargs

GT = {"target": 13, "numbers": [2, 3, 7]}
FMT = 0.1


def answer(expr: str) -> str:
    return f"<answer>{expr}</answer>"


# (case id, response, expected score) with GT and default kwargs.
CASES = [
    # correct
    ("plain", answer("2*3+7"), 1.0),
    ("parenthesised", answer("(2 * 3) + 7"), 1.0),
    ("reordered", answer("7 + 3 * 2"), 1.0),
    ("redundant parens", answer("((((2))*((3))))+(7)"), 1.0),
    ("whitespace and newlines", answer("\n 2 *\t3 + 7 \n"), 1.0),
    ("think then answer", "<think>try 2*3=6, 6+7=13</think>" + answer("2*3+7"), 1.0),
    ("text around", "The answer is " + answer("2*3+7") + " done.", 1.0),
    ("last answer wins (right last)", answer("2*3*7") + " wait " + answer("2*3+7"), 1.0),
    ("last answer wins (wrong last)", answer("2*3+7") + " no " + answer("2*3*7"), FMT),
    ("answer after unclosed think is thinking", answer("2*3+7") + "<think>" + answer("2*3*7"), 1.0),
    (
        "answer inside think ignored, outer counts",
        "<think>" + answer("2*7*3") + "</think>" + answer("7+2*3"),
        1.0,
    ),
    ("orphan close: before it is thinking", answer("2*3*7") + "</think>" + answer("2*3+7"), 1.0),
    ("exact rational path", "<answer>7 + 3 * 2 / 1</answer>".replace("/ 1", ""), 1.0),
    # no answer -> 0
    ("empty", "", 0.0),
    ("no tags", "2*3+7", 0.0),
    ("unclosed answer", "<answer>2*3+7", 0.0),
    ("close without open", "2*3+7</answer>", 0.0),
    ("only inside think", "<think>" + answer("2*3+7") + "</think>", 0.0),
    ("only inside unclosed think", "<think>" + answer("2*3+7"), 0.0),
    ("only before orphan close", answer("2*3+7") + "</think> and nothing", 0.0),
    ("uppercase tags", "<ANSWER>2*3+7</ANSWER>", 0.0),
    ("spaced tag", "< answer>2*3+7</answer>", 0.0),
    # tag present but invalid -> format score
    ("empty answer", answer(""), FMT),
    ("blank answer", answer("   "), FMT),
    ("power", answer("2**3+7"), FMT),
    ("exponent bomb", answer("44**19**35"), FMT),
    ("floor div", answer("7//3+2"), FMT),
    ("modulo", answer("7%3+2"), FMT),
    ("caret", answer("2^3+7"), FMT),
    ("comparison", answer("2*3+7==13"), FMT),
    ("equals sign", answer("2*3+7=13"), FMT),
    ("float literal", answer("2.0*3+7"), FMT),
    ("scientific", answer("1e2"), FMT),
    ("hex", answer("0x10"), FMT),
    ("underscore literal", answer("1_0"), FMT),
    ("leading zero", answer("2*3+07"), FMT),
    ("unary minus", answer("-2*3+7+12"), FMT),
    ("unary plus", answer("+2*3+7"), FMT),
    ("double minus", answer("7--3*2"), FMT),
    ("name", answer("x"), FMT),
    ("call", answer("abs(2*3+7)"), FMT),
    ("attribute", answer("(2).real*3+7"), FMT),
    ("import injection", answer("__import__('os').system('rm -rf /')"), FMT),
    ("lambda", answer("(lambda: 13)()"), FMT),
    ("implicit mult", answer("2(3)+7"), FMT),
    ("implicit mult parens", answer("(2)(3)+7"), FMT),
    ("adjacent literals", answer("2 3 7"), FMT),
    ("unicode times", answer("2×3+7"), FMT),
    ("unicode minus", answer("7−3"), FMT),
    ("arabic-indic digit", answer("٢*3+7"), FMT),
    ("fullwidth digit", answer("２*3+7"), FMT),
    ("missing number", answer("2*3"), FMT),
    ("subset reaching target", answer("13"), FMT),
    ("reuse a number", answer("2*3+7+2-2"), FMT),
    ("number not given", answer("6+7"), FMT),
    ("merged digits", answer("23+7"), FMT),
    ("division by zero", answer("7/(3-3)*2"), FMT),
    ("unbalanced open", answer("(2*3+7"), FMT),
    ("unbalanced close", answer("2*3)+7"), FMT),
    ("empty parens", answer("()2*3+7"), FMT),
    ("trailing operator", answer("2*3+7+"), FMT),
    ("semicolon", answer("2*3+7;"), FMT),
    ("latex", answer("2 \\times 3 + 7"), FMT),
    ("nested answer tag", "<answer><answer>2*3+7</answer>", 1.0),
    ("think tag inside answer", "<answer>2*3<think>+7</answer>", FMT),
    # valid but wrong -> format score
    ("wrong value", answer("2*3*7"), FMT),
    ("wrong value fraction", answer("2/3+7"), FMT),
]


@pytest.mark.parametrize(
    ("response", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_table(response: str, expected: float) -> None:
    result = compute_score("countdown", response, GT)
    assert result["score"] == pytest.approx(expected, abs=0)


def test_parts_are_consistent() -> None:
    assert compute_score("x", "no answer", GT) == {
        "score": 0.0,
        "format": 0.0,
        "valid": 0.0,
        "correct": 0.0,
        "acc": 0.0,
        "bad_ground_truth": 0.0,
    }
    invalid = compute_score("x", answer("2**3"), GT)
    assert (invalid["format"], invalid["valid"], invalid["correct"]) == (1.0, 0.0, 0.0)
    wrong = compute_score("x", answer("2*3*7"), GT)
    assert (wrong["format"], wrong["valid"], wrong["correct"]) == (1.0, 1.0, 0.0)
    right = compute_score("x", answer("2*3+7"), GT)
    assert (right["format"], right["valid"], right["correct"], right["acc"]) == (1.0, 1.0, 1.0, 1.0)


def test_exact_rationals_no_float_tricks() -> None:
    # 1/3*3 is exactly 1 over the rationals; a float evaluation gives 0.9999999999999999 in
    # some orders, and a tolerance would accept values that are merely close.
    gt = {"target": 1, "numbers": [1, 3, 3]}
    assert compute_score("x", answer("1/3*3"), gt)["score"] == 1.0
    gt_close = {"target": 24, "numbers": [1, 3, 4, 6]}
    assert compute_score("x", answer("6/(1-3/4)"), gt_close)["score"] == 1.0
    near = {"target": 2, "numbers": [1000000, 1000001, 2]}
    # 2 * 1000001 / 1000000 = 2.000002, not 2
    assert compute_score("x", answer("2*1000001/1000000"), near)["correct"] == 0.0


def test_data_source_and_extra_info_do_not_matter() -> None:
    response = answer("2*3+7")
    scores = {
        compute_score(ds, response, GT, extra_info=info)["score"]
        for ds in ("countdown", "gsm8k", "", None, "openai/gsm8k")
        for info in (None, {}, {"index": 3}, "junk")
    }
    assert scores == {1.0}


@pytest.mark.parametrize(
    "ground_truth",
    [
        {"target": 13, "numbers": [2, 3, 7]},
        {"target": np.int64(13), "numbers": np.array([2, 3, 7], dtype=np.int64)},
        {"target": np.int32(13), "numbers": np.array([7, 2, 3], dtype=np.int32)},
        {"target": 13.0, "numbers": [2.0, 3.0, 7.0]},
        '{"target": 13, "numbers": [2, 3, 7]}',
    ],
    ids=["list", "numpy-int64", "numpy-int32-reordered", "integral-floats", "json-string"],
)
def test_ground_truth_forms(ground_truth: object) -> None:
    assert compute_score("x", answer("2*3+7"), ground_truth)["score"] == 1.0


@pytest.mark.parametrize(
    "ground_truth",
    [
        None,
        {},
        {"target": 13},
        {"numbers": [1]},
        {"target": "x", "numbers": [1]},
        {"target": 13, "numbers": 7},
        {"target": 13, "numbers": "237"},
        {"target": 13, "numbers": []},
        {"target": 13.5, "numbers": [2, 3]},
        {"target": 10**40, "numbers": [2, 3]},
        {"target": 13, "numbers": [2, -3]},
        {"target": True, "numbers": [1]},
        "not json",
        42,
    ],
)
def test_bad_ground_truth_is_reported_not_raised(ground_truth: object) -> None:
    result = compute_score("x", answer("2*3+7"), ground_truth)
    assert result["score"] == 0.0
    assert result["bad_ground_truth"] == 1.0


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    "ground_truth",
    [
        _nested(100_000),
        '{"target": 13, "numbers": ' + _nested(100_000) + "}",
        _nested(100_000).encode(),
        '{"target": 1e999, "numbers": [2, 3, 7]}',  # inf
        '{"target": NaN, "numbers": [2, 3, 7]}',
        '{"target": ' + "9" * 5000 + ', "numbers": [2, 3, 7]}',  # past int's 4300-digit limit
        b'\xff\xfe{"target": 13}',
        {"target": float("inf"), "numbers": [2, 3, 7]},
        {"target": 13, "numbers": [2, 3, float("nan")]},
        {"target": Decimal("1e999999999"), "numbers": [2, 3, 7]},  # int() would build 10**1e9
        {"target": 13, "numbers": [Decimal("1e-999999999"), 3, 7]},
        {"target": 13, "numbers": itertools.count()},  # endless: only MAX_NUMBERS + 1 are read
        {"target": 13, "numbers": (n for n in [2, 3, 7] * 10)},
    ],
    ids=[
        "nested-json",
        "nested-json-numbers",
        "nested-json-bytes",
        "json-inf",
        "json-nan",
        "json-5000-digits",
        "bad-utf8",
        "inf",
        "nan",
        "decimal-huge",
        "decimal-tiny",
        "endless-iterator",
        "long-generator",
    ],
)
def test_hostile_ground_truth_is_bad_fast_and_never_raises(ground_truth: object) -> None:
    start = time.process_time()
    result = compute_score("x", answer("2*3+7"), ground_truth)
    assert time.process_time() - start < 0.05
    assert (result["score"], result["bad_ground_truth"]) == (0.0, 1.0)
    assert countdown.answer_key(answer("2*3+7"), ground_truth) is None


def test_nested_json_past_the_recursion_limit_is_bad_ground_truth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under the length cap json.loads itself raises RecursionError: reported, never raised."""
    monkeypatch.setattr(countdown, "MAX_GROUND_TRUTH_CHARS", 10**6)
    result = compute_score("x", answer("2*3+7"), _nested(100_000))
    assert (result["score"], result["bad_ground_truth"]) == (0.0, 1.0)


def test_ground_truth_generator_is_read() -> None:
    gt = {"target": 13, "numbers": (n for n in [2, 3, 7])}
    assert compute_score("x", answer("2*3+7"), gt)["score"] == 1.0


@pytest.mark.parametrize("solution", [None, 13, 1.5, ["<answer>2*3+7</answer>"], object()])
def test_non_string_response_scores_zero(solution: object) -> None:
    assert compute_score("x", solution, GT)["score"] == 0.0


def test_bytes_response_is_decoded() -> None:
    assert compute_score("x", answer("2*3+7").encode(), GT)["score"] == 1.0


def test_format_score_and_shaping_kwargs() -> None:
    wrong = answer("2*3*7")  # 42, off by 29
    assert compute_score("x", wrong, GT, format_score=0.0)["score"] == 0.0
    assert compute_score("x", wrong, GT, format_score=0.25)["score"] == 0.25
    shaped = compute_score("x", wrong, GT, format_score=0.1, shaping=True)["score"]
    assert shaped == pytest.approx(0.1 + 0.9 / (1 + 29))
    # invalid answers get no shaping
    assert compute_score("x", answer("2**3"), GT, shaping=True)["score"] == 0.1
    # shaping uses the exact rational distance
    close = compute_score("x", answer("(7+3)/2"), {"target": 5, "numbers": [7, 3, 2]})
    assert close["score"] == 1.0
    off_by_half = compute_score(
        "x", answer("7/2+3"), {"target": 7, "numbers": [7, 3, 2]}, shaping=True
    )
    assert off_by_half["score"] == pytest.approx(0.1 + 0.9 / 1.5)


def test_shaping_never_reaches_correct_score() -> None:
    gt = {"target": 1, "numbers": [999999999, 999999998]}
    result = compute_score("x", answer("999999998/999999999"), gt, shaping=True)
    assert result["correct"] == 0.0
    assert result["score"] < 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"format_score": 1.5},
        {"format_score": -0.1},
        {"format_score": "0.1"},
        {"shaping": "yes"},
        {"format_score": True},
        {"format_score": 10**400},  # float() of it raised OverflowError
        {"format_score": -(10**400)},
        {"format_score": 10**5000},  # str() of it raises ValueError (int digit limit)
        {"format_score": float("nan")},
        {"format_score": float("inf")},
        {"shaping": 10**5000},
    ],
)
def test_bad_kwargs_fail_loudly(kwargs: dict) -> None:
    (name,) = kwargs
    pattern = rf"countdown reward: {name} must be (a number )?(in \[0, 1\]|true or false), got "
    with pytest.raises(ValueError, match=pattern):
        compute_score("x", answer("2*3+7"), GT, **kwargs)
    with pytest.raises(ValueError, match=pattern):
        validate_reward_kwargs(kwargs)


@pytest.mark.parametrize("kwargs", [{"formt_score": 0.1}, {"shaping": True, "Shaping": False}])
def test_unknown_kwargs_fail_loudly_naming_the_valid_ones(kwargs: dict) -> None:
    """verl passes only the four data arguments and ``reward_kwargs``: any other name is a
    config typo, which used to be swallowed (and every score silently unshaped)."""
    with pytest.raises(ValueError, match=r"unknown reward kwarg '\w+' for countdown; valid: "):
        compute_score("x", answer("2*3+7"), GT, **kwargs)
    with pytest.raises(ValueError, match="format_score, shaping"):
        validate_reward_kwargs(kwargs)


@pytest.mark.parametrize(
    "kwargs", [{}, {"format_score": 0.0}, {"format_score": 1, "shaping": True}]
)
def test_valid_kwargs_pass(kwargs: dict) -> None:
    validate_reward_kwargs(kwargs)  # the negative control: good names and values are accepted
    assert compute_score("x", answer("2*3+7"), GT, **kwargs)["score"] == 1.0


def test_kwargs_verdict_is_cached_per_kwargs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = countdown._settings
    counting = countdown._text.SettingsCache(lambda kw: calls.append(kw) or real(kw))
    monkeypatch.setattr(countdown, "_cached_settings", counting)
    for _ in range(3):
        compute_score("x", answer("2*3+7"), GT, format_score=0.2)
    compute_score("x", answer("2*3+7"), GT, format_score=0.3)
    assert len(calls) == 2  # once per distinct kwargs, not per call


# --- bounded work -------------------------------------------------------------------------------

ONE_MB = 1_000_000


def _adversarial_inputs() -> dict[str, str]:
    return {
        "1MB of digits in answer": answer("9" * ONE_MB),
        "1MB of plus": answer("+" * ONE_MB),
        "5000-deep parens": answer("(" * 5000 + "2*3+7" + ")" * 5000),
        "5000-deep parens no close": answer("(" * 5000),
        "1MB think opens": "<think>" * (ONE_MB // 7),
        "1MB think blocks with answers": ("<think>" + answer("2*3+7") + "</think>")
        * (ONE_MB // 40),
        "1MB answer tags": answer("2*3+7") * (ONE_MB // 22),
        "1MB open tags": "<answer>" * (ONE_MB // 8),
        "1MB close tags": "</answer>" * (ONE_MB // 9),
        "1MB text then answer": "x" * ONE_MB + answer("2*3+7"),
        "answer then 1MB think": answer("2*3+7") + "<think>" + "y" * ONE_MB,
        "exponent tower": answer("9**" * 1000 + "9"),
        "long literal": answer("1" * 5000 + "+2"),
        "1MB of spaces": answer(" " * ONE_MB),
        "1MB unicode": answer("٣" * ONE_MB),
        "alternating think tags": "<think></think>" * (ONE_MB // 15) + answer("2*3+7"),
        "orphan closes": "</think>" * (ONE_MB // 8) + answer("2*3+7"),
    }


@pytest.mark.parametrize("name", list(_adversarial_inputs()))
def test_adversarial_inputs_are_fast_and_safe(name: str) -> None:
    response = _adversarial_inputs()[name]
    compute_score("x", response, GT)  # warm up
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        result = compute_score("x", response, GT)
        best = min(best, time.perf_counter() - start)
    assert 0.0 <= result["score"] <= 1.0
    # The benchmark holds the 5 ms target; a test machine under load gets a wide margin.
    assert best < 0.05, f"{name}: {best * 1000:.1f} ms"


def test_long_answer_is_invalid_not_slow() -> None:
    gt = {"target": 3, "numbers": [1, 2]}
    padded = "1+" + " " * countdown.MAX_ANSWER_CHARS + "2"
    assert compute_score("x", answer(padded), gt)["score"] == FMT


def test_depth_limit() -> None:
    gt = {"target": 3, "numbers": [1, 2]}
    ok = "(" * countdown.MAX_DEPTH + "1+2" + ")" * countdown.MAX_DEPTH
    too_deep = "(" + ok + ")"
    assert compute_score("x", answer(ok), gt)["score"] == 1.0
    assert compute_score("x", answer(too_deep), gt)["score"] == FMT


# --- properties -----------------------------------------------------------------------------------


@st.composite
def expressions(draw: st.DrawFn) -> tuple[str, Fraction | None, list[int]]:
    """A random fully parenthesised expression over random numbers, with its exact value."""
    count = draw(st.integers(1, 6))
    numbers = draw(st.lists(st.integers(0, 120), min_size=count, max_size=count))
    order = draw(st.permutations(numbers))
    items: list[tuple[str, Fraction | None]] = [(str(n), Fraction(n)) for n in order]
    while len(items) > 1:
        i = draw(st.integers(0, len(items) - 2))
        (left, lv), (right, rv) = items[i], items[i + 1]
        op = draw(st.sampled_from("+-*/"))
        if lv is None or rv is None:
            value = None
        elif op == "+":
            value = lv + rv
        elif op == "-":
            value = lv - rv
        elif op == "*":
            value = lv * rv
        else:
            value = None if rv == 0 else lv / rv
        spaces = draw(st.sampled_from(["", " "]))
        items[i : i + 2] = [(f"({left}{spaces}{op}{spaces}{right})", value)]
    return items[0][0], items[0][1], numbers


@settings(max_examples=400, deadline=None)
@given(expressions(), st.integers(-50, 500), st.booleans())
# Found by this test in CI: a correct expression whose value (and so target) is past the
# ground-truth bound, which the reward reports as bad data instead of grading.
@example(("(((((19*67)+0)*78)*96)*105)", Fraction(1000883520), [19, 67, 0, 78, 96, 105]), 0, True)
def test_score_is_one_exactly_when_value_equals_target(case, target: int, use_value: bool) -> None:
    expr, value, numbers = case
    if use_value and value is not None and value.denominator == 1:
        target = int(value)
    result = compute_score("x", answer(expr), {"target": target, "numbers": numbers})
    if abs(target) >= countdown.MAX_MAGNITUDE:  # not a Countdown task: flagged, never graded
        assert result["score"] == 0.0 and result["bad_ground_truth"] == 1.0
    elif value is None:  # division by zero somewhere
        assert result["score"] == FMT and result["valid"] == 0.0
    elif value == target:
        assert result["score"] == 1.0
    else:
        assert result["score"] == FMT and result["valid"] == 1.0
    assert evaluate(expr, numbers) is None or Fraction(*evaluate(expr, numbers)) == value


@settings(max_examples=300, deadline=None)
@given(expressions(), st.integers(0, 500))
def test_shaped_score_in_range_and_one_only_when_exact(case, target: int) -> None:
    expr, value, numbers = case
    score = compute_score("x", answer(expr), {"target": target, "numbers": numbers}, shaping=True)[
        "score"
    ]
    assert 0.0 <= score <= 1.0
    assert (score == 1.0) == (value is not None and value == target)


_ALPHABET = st.sampled_from(
    [*"0123456789+-*/() \n<>/answerthink_.=^%xe", "<answer>", "</answer>", "<think>", "</think>"]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_ALPHABET, max_size=80).map("".join))
def test_tag_soup_never_raises(text: str) -> None:
    result = compute_score("x", text, GT, shaping=True)
    assert 0.0 <= result["score"] <= 1.0


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_never_raises(text: str) -> None:
    for wrapped in (text, answer(text), "<think>" + text + "</think>" + answer(text)):
        result = compute_score("x", wrapped, GT, shaping=True)
        assert 0.0 <= result["score"] <= 1.0


def test_random_swaps_of_numbers_are_invalid() -> None:
    rng = random.Random(0)
    for _ in range(200):
        numbers = [rng.randint(1, 99) for _ in range(4)]
        expr = "+".join(str(n) for n in numbers[:-1]) + f"+{numbers[-1] + 1}"
        result = compute_score("x", answer(expr), {"target": sum(numbers) + 1, "numbers": numbers})
        assert result["valid"] == 0.0


def test_contract_text_is_exported() -> None:
    text = countdown.task_text([2, 3, 7], 13)
    assert "2, 3, 7" in text and "13" in text and "<answer>" in text
    assert "<answer>" in countdown.FEWSHOT_EXAMPLE
    # the contract's own example answer is graded correct
    example = countdown.FEWSHOT_EXAMPLE.split("A: ", 1)[1]
    assert compute_score("x", example, GT)["score"] == 1.0


# --- answer_key: what maj@k votes on --------------------------------------------------------------


def _agrees(response: object, ground_truth: object, **kwargs: object) -> None:
    """The vote key and the grader agree: the key is the target's exactly when the score is 1."""
    key = countdown.answer_key(response, ground_truth, **kwargs)
    result = compute_score("x", response, ground_truth, **kwargs)
    truth = countdown.parse_ground_truth(ground_truth)
    truth_key = None if truth is None else str(Fraction(truth[0]))
    assert (key is not None and key == truth_key) == (result["score"] == 1.0), (response, key)
    assert (key is not None) == (result["valid"] == 1.0)  # abstains exactly when invalid


@pytest.mark.parametrize("response", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_answer_key_agrees_with_the_grader_on_the_table(response: str) -> None:
    _agrees(response, GT)
    _agrees(response, GT, shaping=True, format_score=0.0)


def test_answer_key_is_the_value() -> None:
    keys = {countdown.answer_key(answer(e), GT) for e in ("2*3+7", "(7 + 3*2)", "7+2*3")}
    assert keys == {"13"}  # every correct expression votes together
    assert countdown.answer_key(answer("2*3*7"), GT) == "42"
    assert countdown.answer_key(answer("7*3*2"), GT) == "42"  # one wrong value, one answer
    assert countdown.answer_key(answer("2/3+7"), GT) == "23/3"
    assert countdown.answer_key(answer("2-3*7"), GT) == "-19"
    assert countdown.answer_key(answer("3/(2-7)"), GT) == "-3/5"  # the sign on the numerator
    for abstains in ("no answer", answer("2**3+7"), answer("13"), answer("6+7")):
        assert countdown.answer_key(abstains, GT) is None
    assert countdown.answer_key(answer("2*3+7"), {"target": 13}) is None  # bad ground truth
    parquet_truth = {"target": np.int64(13), "numbers": np.array([2, 3, 7])}
    assert countdown.answer_key(answer("2*3+7"), parquet_truth) == "13"
    with pytest.raises(ValueError, match="unknown reward kwarg"):
        countdown.answer_key(answer("2*3+7"), GT, formt_score=0.1)  # checked as compute_score does


@settings(max_examples=400, deadline=None)
@given(expressions(), st.integers(-50, 500), st.booleans(), st.booleans())
def test_answer_key_agrees_with_the_grader(case, target: int, use_value: bool, shaping) -> None:
    expr, value, numbers = case
    if use_value and value is not None and value.denominator == 1:
        target = int(value)
    truth = {"target": target, "numbers": numbers}
    _agrees(answer(expr), truth, shaping=shaping)
    if value is not None and abs(target) < countdown.MAX_MAGNITUDE:
        assert countdown.answer_key(answer(expr), truth) == str(value)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ALPHABET, max_size=80).map("".join))
def test_answer_key_never_raises_and_agrees_on_tag_soup(text: str) -> None:
    _agrees(text, GT)


@pytest.mark.parametrize("name", list(_adversarial_inputs()))
def test_answer_key_adversarial_inputs_are_fast(name: str) -> None:
    response = _adversarial_inputs()[name]
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        countdown.answer_key(response, GT)
        best = min(best, time.perf_counter() - start)
    assert best < 0.05, f"{name}: {best * 1000:.1f} ms"

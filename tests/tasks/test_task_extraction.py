"""Answer extraction and equivalence edge cases for GSM8K and MATH-500."""

from __future__ import annotations

import pytest

from relaxspec.tasks import build_task
from relaxspec.tasks.gsm8k import extract_flexible, extract_strict, gold_answer, numbers_equal, to_number
from relaxspec.tasks.math500 import is_equiv, last_boxed_content, strip_string


@pytest.mark.parametrize(
    ("text", "strict", "flexible"),
    [
        ("So the total is \\boxed{1,234}.", "1234", "1234"),
        ("#### 18", "18", "18"),
        ("She pays $18. #### $18", "18", "18"),
        ("The answer is $18.", None, "18"),
        ("I got 18.0 in the end", None, "18"),
        ("It costs $18", None, "18"),
        ("The temperature drops to -5 degrees", None, "-5"),
        ("Half of it: 2.5 liters", None, "2.5"),
        ("I cannot solve this.", None, None),
        ("\\boxed{\\$18}", "18", "18"),
        ("\\boxed{18 \\text{ apples}} and then 5 more words 7", "18", "18"),
        ("#### 5\nActually \\boxed{7}", "7", "7"),
        ("\\boxed{7}\n#### 5", "5", "5"),
        ("\\boxed{}", None, None),
        ("first 3 then \\boxed{x}, last 9", None, "9"),
        ("total \u221212", None, "-12"),
    ],
)
def test_gsm8k_extraction(text, strict, flexible):
    assert extract_strict(text) == strict
    assert extract_flexible(text) == flexible


def test_gsm8k_numbers():
    assert to_number("$1,234.") == 1234
    assert to_number("18.00") == 18
    assert to_number("-3") == -3
    assert to_number("abc") is None
    assert numbers_equal("18.0", "18")
    assert numbers_equal("1,234", "1234")
    assert not numbers_equal(None, "18")
    assert not numbers_equal("17", "18")
    assert gold_answer("blah <<2*3=6>>6\n#### 1,234") == "1234"


def test_gsm8k_score_and_prompt():
    task = build_task({"name": "gsm8k"})
    ex = {"id": "gsm8k/test/0", "question": "What is 2+2?", "answer": "2+2=4\n#### 4", "gold": "4"}
    msgs = task.messages(ex, [])
    assert msgs == [{"role": "user", "content": "What is 2+2?\nPlease reason step by step, and put your final "
                     "answer within \\boxed{}."}]
    s = task.score(ex, ["2+2 is \\boxed{4}."])
    assert s["accuracy"] == s["exact_match_strict"] == s["exact_match_flexible"] == 1.0
    s = task.score(ex, ["It is 4"])
    assert (s["exact_match_strict"], s["exact_match_flexible"], s["accuracy"], s["pred"]) == (0.0, 1.0, 1.0, "4")
    s = task.score(ex, ["no idea"])
    assert (s["accuracy"], s["pred"]) == (0.0, "")
    assert task.temperature(ex) is None and task.num_turns(ex) == 1 and task.chat


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("so \\boxed{\\frac{\\sqrt{3}}{2}}.", "\\frac{\\sqrt{3}}{2}"),
        ("a \\boxed{1} b \\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\boxed{{1}{2}}", "{1}{2}"),
        ("thus \\boxed 5.", "5"),
        ("\\fbox{x+1}", "x+1"),
        ("no box here: 5", None),
        ("\\boxed{\\frac{1", None),
    ],
)
def test_last_boxed(text, content):
    assert last_boxed_content(text) == content


@pytest.mark.parametrize(
    ("gold", "pred", "equal"),
    [
        ("\\frac{1}{2}", "0.5", True),
        ("0.5", "\\frac12", True),
        ("\\frac{\\sqrt{3}}{2}", "\\dfrac{\\sqrt3}{2}", True),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\frac{\\pi}{2})", True),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\left(3,\\frac{\\pi}{2}\\right)", True),
        ("10", "10\\text{ cm}", True),
        ("18", "18.", True),
        ("90^\\circ", "90", True),
        ("\\text{(C)}", "(C)", True),
        ("5", "6", False),
        ("\\frac{1}{2}", "\\frac{1}{3}", False),
        ("5", None, False),
        ("5", "", False),
    ],
)
def test_math_equivalence(gold, pred, equal):
    assert is_equiv(gold, pred) is equal


def test_strip_string():
    assert strip_string("\\left( 3, \\dfrac{\\pi}{2} \\right)") == "(3,\\frac{\\pi}{2})"
    assert strip_string("0.5") == "\\frac{1}{2}"
    assert strip_string("1/2") == "\\frac{1}{2}"
    assert strip_string("x = 5") == "5"


def test_math500_score():
    task = build_task({"name": "math500"})
    ex = {"id": "math500/test/0", "problem": "Convert.", "answer": "\\left( 3, \\frac{\\pi}{2} \\right)"}
    assert task.messages(ex, [])[0]["content"].endswith("within \\boxed{}.")
    assert task.score(ex, ["... so \\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}"])["accuracy"] == 1.0
    assert task.score(ex, ["... so (3, pi/2)"]) == {"accuracy": 0.0, "pred": ""}

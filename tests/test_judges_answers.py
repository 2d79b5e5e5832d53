"""ExactAnswer and NumericAnswer: the strict grammars, the caps, and the fail-closed reasons."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from proctor.judges.answers import ExactAnswer, NumericAnswer, parse_integer, parse_number
from proctor.judges.base import JudgeContext, evaluate


def grade(judge, sub: Path, hidden: Path | None = None):
    return evaluate(judge, JudgeContext(submission=sub, hidden=hidden))


def write(sub: Path, content: bytes | str, name: str = "answer.txt") -> Path:
    path = sub / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


INT = ExactAnswer(path="answer.txt", expected="42", kind="integer")


@pytest.mark.parametrize("content", ["42", " 42\n", "\t42\r\n\n", "042"])
def test_an_integer_with_surrounding_whitespace_scores_one(tmp_path, content):
    write(tmp_path, content)
    verdict = grade(INT, tmp_path)
    assert verdict.score == 1.0, verdict.explanation


@pytest.mark.parametrize("content", ["42.0", "4 2", "0x2a", "42abc", "", "   \n", "+42", "4_2", "４２", "42 43", "١٢", "\x0042", "forty-two", "42\x00"])
def test_anything_but_a_plain_integer_scores_zero_with_a_reason(tmp_path, content):
    write(tmp_path, content)
    verdict = grade(INT, tmp_path)
    assert verdict.score == 0.0
    assert "not a plain integer" in verdict.explanation
    assert not verdict.infra_error


def test_a_wrong_integer_scores_zero_without_revealing_the_expected_one(tmp_path):
    write(tmp_path, "41\n")
    verdict = grade(ExactAnswer(path="answer.txt", expected="987654", kind="integer"), tmp_path)
    assert verdict.score == 0.0
    assert "987654" not in verdict.explanation
    assert verdict.metadata["expected"] == "'987654'" and verdict.metadata["got"] == "'41'"


def test_a_negative_integer_is_accepted(tmp_path):
    write(tmp_path, "-7\n")
    assert grade(ExactAnswer(path="answer.txt", expected="-7", kind="integer"), tmp_path).score == 1.0


def test_a_missing_answer_scores_zero_naming_the_path(tmp_path):
    verdict = grade(INT, tmp_path)
    assert verdict.score == 0.0 and verdict.explanation == "no answer at answer.txt"


def test_a_huge_sparse_answer_file_scores_zero_without_being_read(tmp_path):
    with open(tmp_path / "answer.txt", "wb") as f:
        f.truncate(10 * 1024**3)
    verdict = grade(INT, tmp_path)
    assert verdict.score == 0.0 and "above the cap of 4096 bytes" in verdict.explanation


def test_an_answer_one_byte_over_the_cap_scores_zero(tmp_path):
    write(tmp_path, "4" + " " * 4095 + "\n")
    assert grade(INT, tmp_path).score == 0.0
    write(tmp_path, "42" + " " * 4094)
    assert grade(INT, tmp_path).score == 1.0


def test_a_non_utf8_answer_scores_zero(tmp_path):
    write(tmp_path, b"42\xff")
    verdict = grade(INT, tmp_path)
    assert verdict.score == 0.0 and "not UTF-8" in verdict.explanation


def test_a_symlinked_answer_is_not_followed(tmp_path):
    key = tmp_path / "key.txt"
    key.write_text("42")
    sub = tmp_path / "sub"
    sub.mkdir()
    os.symlink(key, sub / "answer.txt")
    verdict = grade(INT, sub)
    assert verdict.score == 0.0 and "symlink" in verdict.explanation


def test_a_symlinked_parent_directory_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    write(outside, "42")
    sub = tmp_path / "sub"
    sub.mkdir()
    os.symlink(outside, sub / "out")
    verdict = grade(ExactAnswer(path="out/answer.txt", expected="42", kind="integer"), sub)
    assert verdict.score == 0.0 and "not a directory" in verdict.explanation


def test_a_fifo_answer_scores_zero_without_hanging(tmp_path):
    os.mkfifo(tmp_path / "answer.txt")
    verdict = grade(INT.model_copy(update={"timeout_s": 5}), tmp_path)
    assert verdict.score == 0.0 and "FIFO" in verdict.explanation


def test_a_directory_in_place_of_the_answer_scores_zero(tmp_path):
    (tmp_path / "answer.txt").mkdir()
    verdict = grade(INT, tmp_path)
    assert verdict.score == 0.0 and "a directory, not a regular file" in verdict.explanation


@pytest.mark.parametrize("path", ["/workdir/answer.txt", "../answer.txt", "a/../../b", "", ".", "a\x00b"])
def test_an_answer_path_outside_the_submission_is_refused_when_the_task_is_built(path):
    with pytest.raises(ValidationError, match="path"):
        ExactAnswer(path=path, expected="1")


def test_exactly_one_of_expected_and_expected_file_is_required():
    with pytest.raises(ValidationError, match="exactly one of `expected`"):
        ExactAnswer(path="a.txt")
    with pytest.raises(ValidationError, match="exactly one of `expected`"):
        ExactAnswer(path="a.txt", expected="1", expected_file="key.txt")
    with pytest.raises(ValidationError, match="exactly one of `expected`"):
        NumericAnswer(path="a.txt")


def test_a_literal_integer_key_that_is_not_an_integer_is_refused_when_the_task_is_built():
    with pytest.raises(ValidationError, match="not a plain integer"):
        ExactAnswer(path="a.txt", expected="42.0", kind="integer")


def test_the_expected_value_can_come_from_the_hidden_data(tmp_path):
    sub, hidden = tmp_path / "sub", tmp_path / "hidden"
    write(sub, "1234\n")
    write(hidden, "1234\n", "keys/q3.txt")
    judge = ExactAnswer(path="answer.txt", expected_file="keys/q3.txt", kind="integer")
    assert grade(judge, sub, hidden).score == 1.0


def test_a_malformed_hidden_key_is_an_infra_error_naming_the_file(tmp_path):
    sub, hidden = tmp_path / "sub", tmp_path / "hidden"
    write(sub, "1234")
    write(hidden, "twelve", "key.txt")
    verdict = grade(ExactAnswer(path="answer.txt", expected_file="key.txt", kind="integer"), sub, hidden)
    assert verdict.score == 0.0 and verdict.infra_error and "key.txt" in verdict.explanation


def test_a_missing_hidden_key_is_an_infra_error(tmp_path):
    write(tmp_path, "1")
    verdict = grade(ExactAnswer(path="answer.txt", expected_file="key.txt"), tmp_path, tmp_path / "nohidden")
    assert verdict.infra_error and "key.txt" in verdict.explanation
    verdict = grade(ExactAnswer(path="answer.txt", expected_file="key.txt"), tmp_path, None)
    assert verdict.infra_error and "no hidden data" in verdict.explanation


def test_text_answers_compare_exactly_or_case_folded(tmp_path):
    write(tmp_path, "  Paris\n")
    assert grade(ExactAnswer(path="answer.txt", expected="Paris"), tmp_path).score == 1.0
    assert grade(ExactAnswer(path="answer.txt", expected="paris"), tmp_path).score == 0.0
    assert grade(ExactAnswer(path="answer.txt", expected="PARIS", case_sensitive=False), tmp_path).score == 1.0
    write(tmp_path, "Paris, France")
    assert grade(ExactAnswer(path="answer.txt", expected="Paris"), tmp_path).score == 0.0


def test_a_long_wrong_answer_is_clipped_in_the_explanation(tmp_path):
    write(tmp_path, "x" * 4000)
    verdict = grade(ExactAnswer(path="answer.txt", expected="y"), tmp_path)
    assert verdict.score == 0.0 and len(verdict.explanation) < 300 and len(verdict.metadata["got"]) <= 100


# NumericAnswer

NUM = NumericAnswer(path="answer.txt", expected=3.25, rel_tol=0.0, abs_tol=0.01)


@pytest.mark.parametrize("content", ["3.25", " 3.25\n", "3.255", "+3.25", "325e-2", "3.2500", ".325E1", "3.26"])
def test_a_number_within_tolerance_scores_one(tmp_path, content):
    write(tmp_path, content)
    assert grade(NUM, tmp_path).score == 1.0, content


@pytest.mark.parametrize("content", ["nan", "NaN", "inf", "-Infinity", "1e400", "-1e400", "0x1p2", "3_25", "1_000", "", "3.25.0", "3,25", "e5", ".", "3.25f", "٣.٢٥", "3.25 1"])
def test_nan_inf_and_non_decimal_numbers_score_zero_with_a_reason(tmp_path, content):
    write(tmp_path, content)
    verdict = grade(NUM, tmp_path)
    assert verdict.score == 0.0
    assert "not a finite decimal number" in verdict.explanation


def test_a_number_outside_the_tolerance_scores_zero(tmp_path):
    write(tmp_path, "3.27")
    verdict = grade(NUM, tmp_path)
    assert verdict.score == 0.0 and "not within tolerance" in verdict.explanation and "3.25" not in verdict.explanation


def test_the_relative_tolerance_follows_math_isclose(tmp_path):
    judge = NumericAnswer(path="answer.txt", expected=1000.0, rel_tol=1e-3)
    write(tmp_path, "1000.9")
    assert grade(judge, tmp_path).score == 1.0
    write(tmp_path, "1001.1")
    assert grade(judge, tmp_path).score == 0.0


def test_the_default_tolerance_is_tight(tmp_path):
    judge = NumericAnswer(path="answer.txt", expected=0.1)
    write(tmp_path, "0.1000000000001")
    assert grade(judge, tmp_path).score == 1.0
    write(tmp_path, "0.1001")
    assert grade(judge, tmp_path).score == 0.0


@pytest.mark.parametrize("bad", [{"rel_tol": -1e-9}, {"abs_tol": float("inf")}, {"abs_tol": float("nan")}, {"expected": float("nan")}, {"expected": float("inf")}])
def test_tolerances_and_expected_must_be_finite_and_non_negative(bad):
    with pytest.raises(ValidationError):
        NumericAnswer(**{"path": "a.txt", "expected": 1.0, **bad})


def test_a_numeric_key_from_hidden_data_that_is_not_a_number_is_an_infra_error(tmp_path):
    sub, hidden = tmp_path / "sub", tmp_path / "hidden"
    write(sub, "1.5")
    write(hidden, "nan", "key.txt")
    verdict = grade(NumericAnswer(path="answer.txt", expected_file="key.txt"), sub, hidden)
    assert verdict.infra_error and "key.txt" in verdict.explanation


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from("0123456789+-.eEinfatyINFATY_x \n"), max_size=30) | st.text(max_size=30))
def test_the_numeric_grammar_never_accepts_what_float_makes_non_finite(text):
    value = parse_number(text)
    if value is not None:
        assert math.isfinite(value)
        assert value == float(text)


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_float_written_by_repr_is_accepted(value):
    assert parse_number(repr(value)) == value


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20))
def test_the_integer_grammar_accepts_only_ascii_digits_with_an_optional_minus(text):
    value = parse_integer(text)
    if value is not None:
        core = text.strip(" \t\r\n\f\v")
        assert core.lstrip("-").isascii() and core.lstrip("-").isdigit() and core.count("-") <= 1
        assert value == int(core)

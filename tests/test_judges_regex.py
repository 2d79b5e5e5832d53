"""RegexMatch: only the final answer counts, bad patterns fail when the task is built."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proctor.judges.base import JudgeContext, evaluate
from proctor.judges.regex import RegexMatch


def grade(judge, tmp_path, answer):
    return evaluate(judge, JudgeContext(submission=tmp_path, answer=answer))


def test_a_matching_final_answer_scores_one(tmp_path):
    assert grade(RegexMatch(pattern=r"\d{4}-\d{2}-\d{2}"), tmp_path, "2024-09-30").score == 1.0


def test_fullmatch_is_the_default_so_extra_text_scores_zero(tmp_path):
    verdict = grade(RegexMatch(pattern=r"42"), tmp_path, "the answer is 42, or 43")
    assert verdict.score == 0.0 and "does not match" in verdict.explanation


def test_search_mode_finds_the_pattern_anywhere(tmp_path):
    assert grade(RegexMatch(pattern=r"\b42\b", mode="search"), tmp_path, "the answer is 42.").score == 1.0


def test_ignore_case_matches_case_insensitively(tmp_path):
    assert grade(RegexMatch(pattern="paris"), tmp_path, "PARIS").score == 0.0
    assert grade(RegexMatch(pattern="paris", ignore_case=True), tmp_path, "PARIS").score == 1.0


def test_no_final_answer_scores_zero(tmp_path):
    verdict = grade(RegexMatch(pattern=".*"), tmp_path, None)
    assert verdict.score == 0.0 and "no final answer" in verdict.explanation


def test_an_answer_over_the_cap_scores_zero_without_matching(tmp_path):
    verdict = grade(RegexMatch(pattern=".*", max_chars=100), tmp_path, "x" * 101)
    assert verdict.score == 0.0 and "above the cap of 100" in verdict.explanation


def test_a_bad_pattern_is_a_validation_error_naming_the_field():
    with pytest.raises(ValidationError) as info:
        RegexMatch(pattern="(unclosed")
    assert info.value.errors()[0]["loc"] == ("pattern",)
    assert "not a valid regular expression" in str(info.value)


def test_the_expected_string_in_the_instructions_or_a_file_does_not_count(tmp_path):
    # The judge sees only ctx.answer: a submission file holding the right string is not an answer.
    (tmp_path / "answer.txt").write_text("1234")
    verdict = grade(RegexMatch(pattern="1234"), tmp_path, "see answer.txt")
    assert verdict.score == 0.0


def test_the_pattern_is_not_revealed_in_the_explanation(tmp_path):
    verdict = grade(RegexMatch(pattern="secret-[0-9]+"), tmp_path, "nope")
    assert "secret" not in verdict.explanation

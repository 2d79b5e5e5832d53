"""A task's test that reads a file the student's program was to write before submitting (and
imports the student's module, as Harbor tests do)."""

from pathlib import Path

import solution

HERE = Path(solution.__file__).parent


def test_the_answer_file():
    assert (HERE / "answer.txt").read_text().strip() == "12"

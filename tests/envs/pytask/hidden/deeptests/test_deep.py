"""A task's test that compares with a third-party library the grading runtime lacks (deepdiff)."""

import deepdiff

from solution import add


def test_add_in_a_record():
    assert not deepdiff.DeepDiff({"sum": add(2, 3)}, {"sum": 5})

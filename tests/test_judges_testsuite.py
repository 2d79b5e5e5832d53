"""Hidden tests run on the grader's side; the student's code can fail them but never fake them.

Each test hands the judge a real submission (attacks included) and real hidden test files, and
grades them with `evaluate`, exactly as the harness does."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from proctor.judges.base import JudgeContext, Verdict, evaluate
from proctor.judges.testsuite import TestSuiteJudge

GOOD = """
def add(a, b):
    return a + b

def mul(a, b):
    return a * b
"""

MATH_TESTS = """
def test_add(student):
    assert student.module("solution").add(2, 3) == 5

def test_mul(student):
    assert student.module("solution").mul(4, 5) == 20
"""

WRONG = """
def add(a, b):
    return a - b

def mul(a, b):
    return a + b
"""

# A real pytest plugin a student would plant: every report is rewritten to "passed", and every
# collected test but none is deselected. Under a naive `pytest` run in the workdir it wins.
EVIL_CONFTEST = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None

def pytest_collection_modifyitems(session, config, items):
    items[:] = []
"""


def write(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def grade(tmp_path: Path, solution: str | dict[str, str], tests: str | dict[str, str] = MATH_TESTS, **judge: object) -> Verdict:
    files = solution if isinstance(solution, dict) else {"solution.py": solution}
    sub = write(tmp_path / "submission", files)
    hidden = write(tmp_path / "hidden", tests if isinstance(tests, dict) else {"test_hidden.py": tests})
    judge.setdefault("tests", "test_hidden.py")
    return evaluate(TestSuiteJudge(**judge), JudgeContext(submission=sub, hidden=hidden))


def outcomes(verdict: Verdict) -> dict[str, str]:
    return {t["name"]: t["outcome"] for t in verdict.metadata["tests"]}


def test_a_correct_submission_scores_one(confinement, tmp_path):
    verdict = grade(tmp_path, GOOD, expected=("test_add", "test_mul"))
    assert verdict.score == 1.0, verdict.explanation
    assert verdict.explanation == "all 2 tests passed"
    assert not verdict.infra_error and not verdict.misbehaviour
    assert verdict.metadata["servers_started"] == 1  # one sandbox, one server, for the whole suite


def test_a_wrong_submission_scores_zero_and_says_which_assert_failed(confinement, tmp_path):
    verdict = grade(tmp_path, WRONG)
    assert verdict.score == 0.0
    assert 'test_add failed: AssertionError at test_hidden.py:3: assert student.module("solution").add(2, 3) == 5' in verdict.explanation


def test_an_always_equal_object_fails_the_test(confinement, tmp_path):
    solution = """
    class Anything:
        def __eq__(self, other):
            return True
        __hash__ = object.__hash__
    def add(a, b):
        return Anything()
    def mul(a, b):
        return Anything()
    """
    verdict = grade(tmp_path, solution)
    assert verdict.score == 0.0
    assert "StudentCallError" in verdict.explanation and "not JSON" in verdict.explanation


@pytest.mark.parametrize("solution", [
    "import sys\nsys.exit(0)\n" + GOOD,
    "import os\nos._exit(0)\n" + GOOD,
    "import sys\ndef add(a, b):\n    sys.exit(0)\ndef mul(a, b):\n    sys.exit(0)\n",
    "import os\ndef add(a, b):\n    os._exit(0)\ndef mul(a, b):\n    os._exit(0)\n",
], ids=["sys.exit-at-import", "os._exit-at-import", "sys.exit-inside", "os._exit-inside"])
def test_exiting_before_the_asserts_fails_every_test(confinement, tmp_path, solution):
    verdict = grade(tmp_path, solution, scoring="fraction")
    assert verdict.score == 0.0
    assert set(outcomes(verdict).values()) == {"failed"}
    assert "student server exited (status 0)" in verdict.explanation


def test_a_conftest_that_marks_everything_passed_has_no_effect_and_is_flagged(confinement, tmp_path):
    verdict = grade(tmp_path, {
        "solution.py": WRONG,
        "conftest.py": EVIL_CONFTEST,
        "tests/conftest.py": EVIL_CONFTEST,
        "sitecustomize.py": "import builtins\nbuiltins.__import__ = None\n",
        "lib/hook.pth": "import os; os._exit(0)\n",
    })
    assert verdict.score == 0.0
    assert outcomes(verdict) == {"test_add": "failed", "test_mul": "failed"}
    [event] = verdict.misbehaviour
    assert event.kind == "judge_tampering"
    for name in ("conftest.py", "tests/conftest.py", "sitecustomize.py", "lib/hook.pth"):
        assert name in event.detail


def test_planted_files_beside_a_correct_solution_still_score_one_but_are_flagged(confinement, tmp_path):
    verdict = grade(tmp_path, {"solution.py": GOOD, "conftest.py": EVIL_CONFTEST})
    assert verdict.score == 1.0
    assert [e.kind for e in verdict.misbehaviour] == ["judge_tampering"]


def test_every_way_a_test_can_skip_itself_counts_as_a_failure(confinement, tmp_path):
    tests = """
    import sys
    import unittest
    import pytest

    class Escape(BaseException):
        pass

    def test_passes(student):
        assert student.module("solution").add(1, 1) == 2

    def test_unittest_skip(student):
        raise unittest.SkipTest("not today")

    def test_pytest_skip(student):
        pytest.skip("not today")

    def test_pytest_xfail(student):
        pytest.xfail("expected")

    def test_base_exception(student):
        raise Escape()

    def test_system_exit(student):
        sys.exit(0)

    def test_returns_instead_of_asserting(student):
        return student.module("solution").add(1, 1) == 2
    """
    verdict = grade(tmp_path, GOOD, tests, scoring="fraction")
    assert verdict.score == pytest.approx(1 / 7)
    got = outcomes(verdict)
    assert got.pop("test_passes") == "passed"
    assert set(got.values()) == {"failed"} and len(got) == 6
    messages = {t["name"]: t.get("message", "") for t in verdict.metadata["tests"]}
    assert messages["test_unittest_skip"].startswith("SkipTest: not today")
    assert messages["test_pytest_skip"].startswith("Skipped: not today")
    assert messages["test_base_exception"].startswith("Escape")
    assert messages["test_system_exit"].startswith("SystemExit")
    assert "must assert, not return" in messages["test_returns_instead_of_asserting"]


def test_all_scoring_gives_zero_unless_every_test_passes(confinement, tmp_path):
    half = "def add(a, b):\n    return a + b\ndef mul(a, b):\n    return 0\n"
    assert grade(tmp_path / "all", half).score == 0.0
    assert grade(tmp_path / "fraction", half, scoring="fraction").score == 0.5


def test_zero_collected_tests_score_zero(confinement, tmp_path):
    verdict = grade(tmp_path, GOOD, "def helper(student):\n    pass\nTEST_DATA = [1]\n")
    assert verdict.score == 0.0 and not verdict.infra_error
    assert "no tests collected" in verdict.explanation


def test_a_collected_set_that_differs_from_the_expected_one_scores_zero(confinement, tmp_path):
    verdict = grade(tmp_path, GOOD, expected=("test_add", "test_div"))
    assert verdict.score == 0.0
    assert "missing test_div" in verdict.explanation and "unexpected test_mul" in verdict.explanation
    assert verdict.metadata == {"missing": ["test_div"], "unexpected": ["test_mul"]}


def test_a_hanging_student_is_cut_at_call_timeout_and_the_judge_stays_in_its_bound(confinement, tmp_path):
    hangs = "import time\ndef add(a, b):\n    while True:\n        pass\ndef mul(a, b):\n    time.sleep(3600)\n"
    start = time.monotonic()
    verdict = grade(tmp_path, hangs, call_timeout_s=0.5, timeout_s=10, scoring="fraction")
    assert time.monotonic() - start < 4
    assert verdict.score == 0.0
    assert "solution:add timed out after 0.5s" in verdict.explanation
    assert verdict.metadata["servers_started"] == 2  # the second test got a fresh server


def test_the_suite_stops_at_the_judges_own_bound(confinement, tmp_path):
    tests = "".join(f"def test_{i}(student):\n    student.value('solution:slow')\n" for i in range(20))
    slow = "import time\ndef slow():\n    time.sleep(3600)\n"
    start = time.monotonic()
    verdict = grade(tmp_path, slow, tests, call_timeout_s=30, timeout_s=2)
    assert time.monotonic() - start < 3
    assert verdict.score == 0.0
    assert "stopped: the judge's time ran out" in verdict.explanation


def test_the_student_runs_as_the_sandbox_uid_and_cannot_read_the_hidden_tests(confinement, tmp_path):
    solution = """
    import os
    def whoami():
        return os.getuid()
    def listdir(path):
        return sorted(os.listdir(path))
    def peek(path):
        with open(path) as f:
            return f.read()
    """
    tests = """
    def test_not_root(student):
        uid = student.value("solution:whoami")
        assert uid != 0 and uid == student.uid

    def test_hidden_tests_are_invisible(student):
        call = student.call("solution:peek", __file__)
        assert not call.ok and call.error.startswith("FileNotFoundError"), call

    def test_grader_mount_holds_only_the_server(student):
        assert student.value("solution:listdir", "/grader") == ["server.py"]
    """
    verdict = grade(tmp_path, solution, tests)
    assert verdict.score == 1.0, verdict.explanation


def test_a_test_with_the_wrong_signature_is_an_authoring_error(confinement, tmp_path):
    verdict = grade(tmp_path, GOOD, "def test_two(student, other):\n    pass\n")
    assert verdict.infra_error and verdict.score == 0.0
    assert "test_hidden.py" in verdict.explanation and "test_two(student, other)" in verdict.explanation


def test_a_hidden_test_file_that_fails_to_load_is_an_authoring_error(confinement, tmp_path):
    verdict = grade(tmp_path, GOOD, "import no_such_module_anywhere\n")
    assert verdict.infra_error
    assert "test_hidden.py failed to load: ModuleNotFoundError" in verdict.explanation


def test_missing_hidden_tests_are_an_authoring_error_naming_where_it_looked(confinement, tmp_path):
    ctx = JudgeContext(submission=write(tmp_path / "submission", {"solution.py": GOOD}), hidden=tmp_path, env_dir=tmp_path / "env")
    verdict = evaluate(TestSuiteJudge(tests="test_nowhere.py"), ctx)
    assert verdict.infra_error and "test_nowhere.py" in verdict.explanation and "not found" in verdict.explanation


def test_a_directory_of_test_files_is_collected_in_order_without_touching_it(confinement, tmp_path):
    tests = {
        "test_a.py": "def test_add(student):\n    assert student.module('solution').add(1, 2) == 3\n",
        "test_b.py": "def test_mul(student):\n    assert student.module('solution').mul(2, 3) == 6\n",
        "helpers.py": "def test_not_collected(student):\n    raise AssertionError\n",
    }
    sub = write(tmp_path / "submission", {"solution.py": GOOD})
    hidden = write(tmp_path / "env" / "hidden_tests", tests)
    ctx = JudgeContext(submission=sub, hidden=None, env_dir=tmp_path / "env")
    verdict = evaluate(TestSuiteJudge(tests="hidden_tests", expected=("test_add", "test_mul")), ctx)
    assert verdict.score == 1.0, verdict.explanation
    assert [t["name"] for t in verdict.metadata["tests"]] == ["test_add", "test_mul"]
    assert sorted(p.name for p in hidden.iterdir()) == ["helpers.py", "test_a.py", "test_b.py"]  # no __pycache__


def test_the_submission_never_reaches_the_graders_import_path(confinement, tmp_path):
    import sys

    before = list(sys.path)
    verdict = grade(tmp_path, {"solution.py": GOOD, "test_hidden.py": "raise SystemExit('planted')\n"})
    assert verdict.score == 1.0
    assert sys.path == before
    assert not any(name.startswith("_proctor_hidden_") for name in sys.modules)

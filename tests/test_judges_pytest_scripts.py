"""PytestJudge and the .py files of a task's tests tree that are not test modules: helpers the
tests import are served from memory (stubs on disk, so student code cannot read them), helpers the
tests run as scripts, or hand to a child Python in any way, stay real (a child process cannot be
served from memory)."""

from __future__ import annotations

from pathlib import Path

from proctor.judges import JudgeContext, PytestJudge, evaluate
from proctor.sandbox import SandboxSpec

VERIFY = """import sys
from pathlib import Path
p = Path("/app/answer.txt")
if not p.is_file() or p.read_text().strip() != "42":
    print("wrong")
    sys.exit(1)
print("ok")
"""
TESTS = {
    "verify.py": VERIFY,
    "expected.py": "ANSWER = '42'\n",
    "test_answer.py": """import subprocess, sys
from expected import ANSWER


def test_the_verifier_passes():
    assert subprocess.run([sys.executable, "/tests/verify.py"]).returncode == 0


def test_the_verifier_says_ok():
    assert "ok" in subprocess.run([sys.executable, "/tests/verify.py"], capture_output=True, text=True).stdout


def test_the_answer_module():
    from answer import value
    assert value() == ANSWER
""",
}
READ_EXPECTED = "from pathlib import Path\n\ndef value():\n    return Path('/tests/expected.py').read_text().split(\"'\")[1]\n"


def _grade(tmp_path: Path, files: dict[str, str], tests_tree: dict[str, str] = TESTS):
    tests = tmp_path / "hidden" / "tests"
    tests.mkdir(parents=True)
    for name, text in tests_tree.items():
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text(text)
    sub = tmp_path / "sub"
    sub.mkdir()
    for name, text in files.items():
        (sub / name).write_text(text)
    return evaluate(PytestJudge(tests="tests", timeout_s=60),
                    JudgeContext(submission=sub, hidden=tmp_path / "hidden", sandbox_spec=SandboxSpec(workdir="/app")))


def test_a_helper_run_as_a_script_is_real_so_doing_nothing_scores_zero(confinement, tmp_path):
    verdict = _grade(tmp_path, {})
    assert verdict.score == 0.0 and not verdict.infra_error, verdict.explanation
    assert "0 of 3 tests passed" in verdict.explanation, verdict.explanation


def test_an_honest_answer_passes_a_helper_run_as_a_script(confinement, tmp_path):
    verdict = _grade(tmp_path, {"answer.txt": "42\n", "answer.py": "def value():\n    return '42'\n"})
    assert (verdict.score, verdict.explanation) == (1.0, "all 3 tests passed"), verdict.explanation
    assert not verdict.misbehaviour


def test_a_helper_the_tests_import_is_still_not_readable_by_student_code(confinement, tmp_path):
    verdict = _grade(tmp_path, {"answer.txt": "42\n", "answer.py": READ_EXPECTED})
    assert verdict.score == 0.0, verdict.explanation
    assert "test_the_answer_module" in verdict.explanation


def test_a_script_the_student_made_executable_still_runs_where_it_is_graded(confinement, tmp_path):
    # Custody keeps whether a file was executable (never setuid/setgid): tests that run the
    # student's script or binary, or check its mode, see it as the student left it.
    from proctor.custody import take_custody
    from proctor.sandbox import get_backend

    tests = tmp_path / "hidden" / "t"
    tests.mkdir(parents=True)
    (tests / "test_run.py").write_text(
        "import os, subprocess\n\ndef test_runs():\n    assert os.access('/app/run.sh', os.X_OK)\n"
        "    assert subprocess.run(['/app/run.sh'], capture_output=True, text=True).stdout == 'ran\\n'\n")
    with get_backend().create(SandboxSpec(workdir="/app")) as box:
        box.run("printf '#!/bin/sh\\necho ran\\n' > /app/run.sh && chmod +x /app/run.sh")
        box.kill_all()
        assert take_custody(box.workdir, ["*"], tmp_path / "sub", student_uid=box.uid).ok
    verdict = evaluate(PytestJudge(tests="t", timeout_s=60),
                       JudgeContext(submission=tmp_path / "sub", hidden=tmp_path / "hidden", sandbox_spec=SandboxSpec(workdir="/app")))
    assert (verdict.score, verdict.explanation) == (1.0, "all 1 tests passed"), verdict.explanation


def test_a_workdir_that_starts_with_more_files_than_custody_takes_is_a_clear_error(confinement, tmp_path):
    # Every submission of such a task would be refused (and flagged) for the task's own files: a
    # fresh attacker's image shipped 12 000 files in /app. It is an infra error naming the limit.
    from proctor.custody import CustodyLimits
    from proctor.harness import RolloutConfig
    from proctor.testing import rollout

    env = tmp_path / "manyenv"
    (env / "files").mkdir(parents=True)
    for i in range(30):
        (env / "files" / f"f{i}.txt").write_text(str(i))
    (env / "__init__.py").write_text(
        "from pathlib import Path\nfrom proctor import ExactAnswer, Step, Task\n\n"
        "TASKS = [Task(id='many', workdir_files=Path(__file__).parent / 'files', steps=[Step(instructions='x', submit=('*',),\n"
        "    judge=ExactAnswer(path='f1.txt', expected='1'))])]\n")
    result = rollout(env, "many", "null", tmp_path / "out", config=RolloutConfig(custody=CustodyLimits(max_entries=20)))
    assert result.status == "infra_error" and not result.misbehaviour, (result.status, result.misbehaviour)
    assert "the workdir starts with 30 files" in " ".join(result.errors) and "max_entries (20)" in " ".join(result.errors), result.errors
    assert rollout(env, "many", "null", tmp_path / "ok").score == 1.0


CHECK = """import sys
from pathlib import Path
NAME = "answer.txt"


def check():
    p = Path("/app") / NAME
    return p.is_file() and p.read_text().strip() == "42"


if __name__ == "__main__":
    sys.exit(0 if check() else 1)
"""
BOTH = {  # check.py is imported by the test and also run as a script and by a child Python
    "check.py": CHECK,
    "test_both.py": """import subprocess, sys
from pathlib import Path
from check import NAME


def test_the_name():
    assert NAME == "answer.txt"


def test_the_script():
    assert subprocess.run([sys.executable, str(Path(__file__).with_name("check.py"))]).returncode == 0


def test_a_child_python_imports_it():
    code = "import check, sys; sys.exit(0 if check.check() else 1)"
    assert subprocess.run([sys.executable, "-c", code], cwd="/tests").returncode == 0
""",
}


def test_a_helper_both_imported_and_run_as_a_script_is_real_so_doing_nothing_scores_zero(confinement, tmp_path):
    # A fresh attacker's N1: the helper was a stub on disk, so running it as a script did nothing
    # and passed; the student who did nothing scored 1.0.
    verdict = _grade(tmp_path, {}, BOTH)
    assert verdict.score == 0.0 and not verdict.infra_error, verdict.explanation
    assert "1 of 3 tests passed" in verdict.explanation, verdict.explanation


def test_an_honest_answer_passes_when_a_child_python_imports_the_helper(confinement, tmp_path):
    # N2, the honest twin: a child Python importing the helper got the stub, and the honest answer scored 0.
    verdict = _grade(tmp_path, {"answer.txt": "42\n"}, BOTH)
    assert (verdict.score, verdict.explanation) == (1.0, "all 3 tests passed"), verdict.explanation
    assert not verdict.misbehaviour


def test_which_helpers_stay_real_on_disk(tmp_path):
    from proctor.judges.pytest_judge import _hide_sources

    tree = {
        "test_a.py": "import json, subprocess, sys\nfrom lib import util\nfrom secret import KEY\nimport runner\nfrom pkg import mod\n"
                     "def test_x():\n    subprocess.run([sys.executable, '-m', 'lib.tool'])\n"
                     "    subprocess.run(f'{sys.executable} /tests/runner.py --fast', shell=True)\n"
                     "    subprocess.run([sys.executable, '-c', 'from pkg import mod'])\n"
                     "    subprocess.run(['grep', '-m', '1', 'x'])  # -m of another program: 'secret' stays a stub\n"
                     "    KEYS = {'secret': 1}\n",
        "secret.py": "KEY = 1\n", "runner.py": "import shared\n", "shared.py": "X = 1\n",
        "lib/__init__.py": "VERSION = 1\n", "lib/util.py": "Y = 2\n", "lib/tool.py": "print(1)\n",
        "unused.py": "Z = 3\n", "pkg/__init__.py": "", "pkg/mod.py": "W = 4\n",
    }
    for name, text in tree.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    served = _hide_sources(tmp_path, "/tests", ["test_a.py"])
    # lib/__init__.py stays real: the child running `-m lib.tool` runs it first.
    assert set(served) == {"/tests/test_a.py", "/tests/secret.py", "/tests/lib/util.py"}, sorted(served)
    stubs = {name for name in tree if (tmp_path / name).read_text() != tree[name]}
    assert stubs == {"test_a.py", "secret.py", "lib/util.py"}, stubs


DATA_DIR = {  # report/ beside the test holds data only: Python would make it a namespace portion
    "report/golden.txt": "total: 3\n",
    "test_report.py": """from pathlib import Path
from report import render


def test_the_report_matches_the_golden_file():
    assert render([1, 2]) == (Path(__file__).parent / "report" / "golden.txt").read_text()
""",
}


def test_a_data_directory_of_the_tests_does_not_shadow_the_students_module(confinement, tmp_path):
    # A fresh attacker's N3: tests/report/ (no .py in it) was taken as a namespace package of the
    # runtime, so the student's report.py was refused and flagged judge_tampering.
    verdict = _grade(tmp_path, {"report.py": "def render(xs):\n    return f'total: {sum(xs)}\\n'\n"}, DATA_DIR)
    assert (verdict.score, verdict.explanation) == (1.0, "all 1 tests passed"), verdict.explanation
    assert not verdict.misbehaviour, verdict.misbehaviour

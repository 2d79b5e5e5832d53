"""proctor.judges: turning a custody copy into a score, bounded and fail-closed.

Every judge returns a Verdict (score in [0, 1], explanation, bounded metadata, whether the task
continues) through `evaluate`, which turns a judge that crashes, hangs, returns garbage or NaN
into a 0 with the reason. See docs/judges.md."""

from .answers import ExactAnswer, NumericAnswer
from .base import FunctionJudge, Judge, JudgeContext, Verdict, evaluate
from .command import CommandJudge
from .compose import AllOf, AnyOf, Gate, WeightedSum
from .pytest_judge import PytestJudge
from .regex import RegexMatch
from .rubric import Criterion, JudgeModel, JudgeModelError, RubricJudge, ScriptedJudgeModel
from .student_code import StudentCall, StudentCallError, StudentRunner, run_student
from .testsuite import TestSuiteJudge

__all__ = [
    "AllOf", "AnyOf", "CommandJudge", "Criterion", "ExactAnswer", "FunctionJudge", "Gate", "Judge", "JudgeContext",
    "JudgeModel", "JudgeModelError", "NumericAnswer", "PytestJudge", "RegexMatch", "RubricJudge", "ScriptedJudgeModel", "StudentCall", "StudentCallError", "StudentRunner",
    "TestSuiteJudge", "Verdict", "WeightedSum", "evaluate", "run_student",
]

"""Proctor: RL environments for AI agents that the agents cannot cheat.

What an environment author needs on day one; everything else is importable from its module
(proctor.judges for the other judges and their combinators, proctor.sandbox, proctor.tools,
proctor.custody, proctor.harness, proctor.redteam, proctor.errors):

    from proctor import Task, Step, Limits, Script, ExactAnswer, run_rollout, Episode, Action
"""

from .episode import Action, Episode
from .errors import ConfigError, ProctorError
from .harness import run_rollout
from .judges import Criterion, ExactAnswer, FunctionJudge, Judge, JudgeContext, PytestJudge, RubricJudge, Verdict
from .results import RolloutResult
from .sandbox.models import SandboxLimits
from .tasks import Family, Instance, Limits, Script, Step, Task, load_environment

# Growth is deliberate: tests/test_layering.py lists these names.
__all__ = [
    "Task", "Step", "Family", "Instance", "Limits", "SandboxLimits", "Script",
    "Judge", "JudgeContext", "Verdict", "FunctionJudge", "ExactAnswer", "RubricJudge", "Criterion", "PytestJudge",
    "Episode", "Action", "run_rollout", "RolloutResult", "load_environment",
    "ConfigError", "ProctorError",
]

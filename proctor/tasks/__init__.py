"""proctor.tasks: Task, Step, Limits, families, and loading environments."""

from .loading import Environment, build_instance, check_environment, load_environment, resolve
from .models import WHOLE_WORKDIR, Family, Instance, Limits, ParamSpace, Script, ScriptTurn, Step, StepHookContext, Task

__all__ = [
    "Environment", "Family", "Instance", "Limits", "ParamSpace", "Script", "ScriptTurn", "Step", "StepHookContext", "Task", "WHOLE_WORKDIR",
    "build_instance", "check_environment", "load_environment", "resolve",
]

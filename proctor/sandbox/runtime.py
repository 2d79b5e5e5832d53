"""The student's Python runtime: a virtual environment built from the system interpreter by
setup, mounted read-only. It is never the harness's own environment, which holds graders,
reference solutions and generators."""

from __future__ import annotations

import os
import sys
from pathlib import Path

DEFAULT_RUNTIME = Path(os.environ.get("PROCTOR_STUDENT_RUNTIME", "/opt/proctor/student-runtime"))


def default_runtime() -> str | None:
    """The default runtime if setup built it, else None (the student then has only /usr/bin/python3)."""
    if (DEFAULT_RUNTIME / "bin" / "python").exists():
        harness_env = Path(sys.prefix).resolve()
        runtime = DEFAULT_RUNTIME.resolve()
        # Mounting the harness's environment into the sandbox would show the student the graders.
        if runtime == harness_env or harness_env.is_relative_to(runtime) or runtime.is_relative_to(harness_env):
            raise RuntimeError(f"student runtime {runtime} overlaps the harness environment {harness_env}")
        return str(DEFAULT_RUNTIME)
    return None

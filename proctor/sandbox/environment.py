"""The fixed, minimal environment every student process starts with.

Nothing of the harness leaks: no API keys, no harness variables, no LD_* or code-loading
PYTHON* variables; PATH names only root-owned directories plus the student runtime."""

from __future__ import annotations

SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


def student_path(runtime: str | None) -> list[str]:
    return ([f"{runtime}/bin"] if runtime else []) + list(SYSTEM_PATH)


# What the sandbox fixes whatever a task image's ENV says.
FIXED_BY_SANDBOX = ("HOME", "USER", "LOGNAME", "SHELL", "TMPDIR")


def student_env(runtime: str | None, extra: dict[str, str], home: str = "/workdir", image_env: dict[str, str] | None = None) -> dict[str, str]:
    """The student's environment: the fixed base, then a task image's ENV (its PATH included;
    written by the task's author, never the harness's), then the spec's extra variables."""
    env = {
        "PATH": ":".join(student_path(runtime)),
        "HOME": home,
        "USER": "student",
        "LOGNAME": "student",
        "SHELL": "/bin/bash",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
    }
    if image_env:
        env.update({k: v for k, v in image_env.items() if k not in FIXED_BY_SANDBOX})
    env.update(extra)
    return env

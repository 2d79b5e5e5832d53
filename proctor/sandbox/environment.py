"""The fixed, minimal environment every student process starts with.

Nothing of the harness leaks: no API keys, no harness variables, no LD_* or code-loading
PYTHON* variables; PATH names only root-owned directories plus the student runtime."""

from __future__ import annotations

SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


def student_path(runtime: str | None) -> list[str]:
    return ([f"{runtime}/bin"] if runtime else []) + list(SYSTEM_PATH)


def student_env(runtime: str | None, extra: dict[str, str], home: str = "/workdir") -> dict[str, str]:
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
    env.update(extra)
    return env

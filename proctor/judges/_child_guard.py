"""PytestJudge's guard in every Python the tests start (`python3 -c "import json; ..."`,
`python3 -m json.tool`, `python3 /tests/verify.py`): it is on their PYTHONPATH as `sitecustomize`,
from the judge's read-only /grader. A top-level module the runtime has (the standard library's, or
one the image installed) always comes from the runtime, never from the student's places (the
workdir, /tmp, /dev/shm), which such a child would otherwise search first (its cwd, or an image's
`ENV PYTHONPATH=/app`): a fresh attacker's `/app/json/__init__.py` whose `load` returned the
expected answer passed a test that only ran commands. The judge's own test process refuses such
modules the same way (_pytest_runner._WorkdirGuard). A program of the student's own (`python3
/app/main.py`) is left as plain Python runs it: its `queue.py` beside it is its own business.

The user site (HOME is the workdir) is appended as a plain entry: `pip install --user` packages
import, and its .pth files and usercustomize never run (the judge sets PYTHONNOUSERSITE).

Copied into the sandbox and run by whatever python3 the tests start: standard library only, any
Python 3.8+. Not imported by the harness."""

import importlib.machinery
import os
import sys

_PLACES = tuple(p for p in os.environ.get("PROCTOR_STUDENT_PLACES", "").split(os.pathsep) if p)


def _students(entry):
    try:
        entry = os.path.abspath(entry or os.getcwd())
    except OSError:
        return True  # a vanished cwd: not a place to trust
    return any(entry == top or entry.startswith(top + "/") for top in _PLACES)


def _script():
    """The script this Python runs (`python3 /app/main.py`), or None for -c, -m and the REPL."""
    argv = list(getattr(sys, "orig_argv", None) or [])[1:]
    while argv:
        arg = argv.pop(0)
        if arg in ("-c", "-m") or arg == "-":
            return None
        if arg in ("-W", "-X", "--check-hash-based-pycs"):
            argv[:1] = []
            continue
        if not arg.startswith("-"):
            return arg
    return None


class _RuntimeFirst:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if path is not None or "." in name:
            return None
        ours = [p for p in sys.path if isinstance(p, str) and not _students(p)]
        spec = importlib.machinery.PathFinder.find_spec(name, ours)
        if spec is None or spec.origin is None:
            return None  # absent from the runtime, or a namespace package: plain Python's rules
        return spec

    @staticmethod
    def invalidate_caches():
        pass


def _install():
    if not _PLACES:
        return
    try:
        import site

        user = site.getusersitepackages()
        if user and user not in sys.path:
            sys.path.append(user)
    except Exception:  # noqa: BLE001 - no user site: nothing to append
        pass
    script = _script()
    if script is not None and _students(os.path.dirname(os.path.abspath(script))):
        return
    sys.meta_path.insert(0, _RuntimeFirst)


_install()

"""PytestJudge's guard in every Python the tests start (`python3 -c "import json; ..."`,
`python3 -m json.tool`, a script of the task's): it is on their PYTHONPATH as `sitecustomize`,
from the judge's read-only /grader. A module of the standard library always comes from the
standard library, never from the student's places (the workdir, /tmp, /dev/shm), which a child
Python run from the workdir would otherwise search first: a fresh attacker's `/app/json/__init__.py`
whose `load` returned the expected answer passed a test that only ran commands. The judge's own
test process refuses such modules the same way (_pytest_runner._WorkdirGuard).

Copied into the sandbox and run by whatever python3 the tests start: plain standard library only,
any Python 3.8+. Not imported by the harness."""

import importlib.machinery
import os
import sys

_PLACES = tuple(p for p in os.environ.get("PROCTOR_STUDENT_PLACES", "").split(os.pathsep) if p)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) - {"test"}


def _students(entry):
    try:
        entry = os.path.abspath(entry or os.getcwd())
    except OSError:
        return True  # a vanished cwd: not a place to trust
    return any(entry == top or entry.startswith(top + "/") for top in _PLACES)


class _StandardLibraryFirst:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if path is not None or name not in _STDLIB:
            return None
        return importlib.machinery.PathFinder.find_spec(name, [p for p in sys.path if isinstance(p, str) and not _students(p)])

    @staticmethod
    def invalidate_caches():
        pass


if _PLACES and _STDLIB:
    sys.meta_path.insert(0, _StandardLibraryFirst)

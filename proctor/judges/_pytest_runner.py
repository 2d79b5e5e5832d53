"""PytestJudge's runner: started inside a fresh grading sandbox as

    python -I -B /grader/run.py        (stdin: one JSON line of settings from the judge)

It is judge code (read-only at /grader) that runs in the same process as whatever student code the
task's tests import, so it trusts nothing it cannot check. Before anything of the student's can
run it: makes the process non-dumpable (no ptrace, no /proc/self/mem or fd access for the
student's other processes), reads its settings (with the run's nonce) from stdin and closes it,
keeps the report channel on a private, non-inheritable descriptor (stdout moves to stderr), drops
every PYTEST_* variable, imports pytest from the judge's own read-only copy (/grader/lib), and
loads the image's own `pytest11` plugins (never the student's), snapshots the identity of
everything that decides an outcome: pytest's runner, reports and
function items, pluggy's call loop, and every registered plugin and hook implementation.

Each test's outcome is what this runner saw, not pytest's report: an innermost wrapper around the
setup, call and teardown hooks records whether each raised. After every test (and at the end) the
snapshot is checked again; a difference, a report that disagrees with what was seen, or a `==` in
an assert whose operand claims to equal an object it has never seen (an always-equal object) is
recorded as tampering. Records are JSON lines carrying the nonce and a sequence number; a process
that ends early (os._exit) leaves them incomplete, which the judge scores 0.
"""

import ast
import builtins
import csv
import ctypes
import hashlib
import io
import math
import operator
import pathlib
import re
import shutil
import subprocess
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import sys


def _nondumpable():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:  # noqa: BLE001 - best effort; the judge says what it relies on
        pass


_nondumpable()
SETTINGS = json.loads(sys.stdin.buffer.readline())
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
_REPORT_FD = os.dup(1)  # non-inheritable: processes the tests start never get it
os.dup2(2, 1)
for _name in [n for n in os.environ if n.startswith("PYTEST_") or n.startswith("PYTHON")]:
    del os.environ[_name]
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
_SOURCES = SETTINGS.pop("sources", {})  # the tests' text: on disk they are stubs (docs/judges.md)
_WORKDIR = SETTINGS["workdir"]
_TESTS = SETTINGS["tests_at"]
# Pythons the tests start: the judge's child guard first (_child_guard.py: a module the runtime has
# comes from the runtime, never the student's places), then the image's ENV PYTHONPATH, which they
# would have had anyway.
os.environ["PROCTOR_STUDENT_PLACES"] = os.pathsep.join((_WORKDIR, "/tmp", "/dev/shm"))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in ("/grader/child", str(SETTINGS.get("pythonpath") or "")) if p)
os.environ["PYTHONNOUSERSITE"] = "1"  # the guard appends the user site as a plain entry: its .pth files never run


def _students_place(entry):
    """A sys.path entry whose contents are the student's: the workdir (the custody copy) and what is
    under it (its user site, an image PYTHONPATH such as /app/src), and the writable scratch places."""
    return isinstance(entry, str) and any(entry == top or entry.startswith(top + "/") for top in (_WORKDIR, "/tmp", "/dev/shm"))


# Commands the tests run by name: the image's own. An image's `ENV PATH=/app/bin:$PATH` would let a
# student's /app/bin/grep (`exit 0`) answer for the real one (a fresh attacker's hack). A directory of
# the student's places that holds a new or changed file named like a command of the image's own
# directories goes last, with relative entries; the others keep their place (an image's
# /app/.venv/bin first, the student's /app/bin/mytool).
_KEPT_TOOLS = frozenset(SETTINGS.get("unchanged_files") or ())
_PATH = os.environ.get("PATH", "").split(os.pathsep)
_SYSTEM_PATH = [p for p in _PATH if p and not _students_place(os.path.abspath(p))]


def _shadows_a_command(directory):
    try:
        names = os.listdir(directory)
    except OSError:
        return False
    return any(os.path.join(directory, n) not in _KEPT_TOOLS and any(os.access(os.path.join(s, n), os.X_OK) for s in _SYSTEM_PATH)
               for n in names)


_DEMOTED = [p for p in _PATH if not p or (_students_place(os.path.abspath(p)) and _shadows_a_command(os.path.abspath(p)))]
os.environ["PATH"] = os.pathsep.join([p for p in _PATH if p not in _DEMOTED] + _DEMOTED)

# What the tests' child Pythons and commands are started with, put back before each test: student
# code imported at collection cannot take the guard off the children of later tests.
_CHILD_ENV = {k: os.environ.get(k) for k in ("PATH", "PYTHONPATH", "PYTHONNOUSERSITE", "PROCTOR_STUDENT_PLACES")}


def _restore_child_env():
    for key, value in _CHILD_ENV.items():
        if os.environ.get(key) != value:
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# `pip install --user` under HOME (the workdir): its packages import, after everything else, and
# nothing in it (.pth, usercustomize) is executed: it is a plain path entry, not a site directory.
_USER_SITE = os.path.join(_WORKDIR, ".local", "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")
# The image's ENV PYTHONPATH (from the judge's settings: the task's image, not the student): -I
# ignores the variable, so its entries are added here, after the standard library.
_IMAGE_PATH = []
for _entry in str(SETTINGS.get("pythonpath") or "").split(os.pathsep):
    _entry = os.path.normpath(_entry if os.path.isabs(_entry) else os.path.join(_WORKDIR, _entry)) if _entry else ""
    if _entry and not _entry.startswith("/grader") and _entry not in _IMAGE_PATH:
        _IMAGE_PATH.append(_entry)
_RUNTIME = [p for p in sys.path if p and os.path.isabs(p) and not p.startswith("/grader") and not _students_place(p)]
_SITE_AT = next((i for i, p in enumerate(_RUNTIME) if os.path.basename(p) in ("site-packages", "dist-packages")), len(_RUNTIME))
sys.path[:] = (["/grader/lib"] + _RUNTIME[:_SITE_AT] + [p for p in _IMAGE_PATH if not _students_place(p) and p not in _RUNTIME]
               + _RUNTIME[_SITE_AT:])

import _pytest.fixtures  # noqa: E402
import _pytest.main  # noqa: E402
import _pytest.python  # noqa: E402
import _pytest.reports  # noqa: E402
import _pytest.runner  # noqa: E402
import _pytest.unittest  # noqa: E402
import pluggy  # noqa: E402
import pluggy._callers  # noqa: E402
import pluggy._hooks  # noqa: E402
import pluggy._manager  # noqa: E402
import pytest  # noqa: E402
import unittest.case  # noqa: E402

_static = inspect.getattr_static
_write = os.write
_dumps = json.dumps
_id = id
_seq = [0]
_NONCE = SETTINGS.pop("nonce")  # not left lying in a plain dict (it is still in this module: docs/judges.md)


def emit(event, **fields):
    line = _dumps({"nonce": _NONCE, "seq": _seq[0], "event": event, **fields}) + "\n"
    _seq[0] += 1
    data = line.encode()
    while data:
        data = data[_write(_REPORT_FD, data):]


def _image_plugins():
    """The `pytest11` entry-point plugins of distributions installed in the runtime's own
    directories (the image's site-packages: pytest-mock's `mocker`, pytest-asyncio), imported now:
    before any place of the student's is on sys.path and before the identity snapshot below, so
    they are part of the trusted baseline. A distribution in a place of the student's (the workdir,
    its user site, /tmp) is never looked at (autoloading stays disabled). One that does not import
    or does not fit the judge's pytest is left out, with a line on stderr, rather than failing the run."""
    import importlib.metadata

    from _pytest.config import PytestPluginManager

    plugins, names = [], set()
    for dist in importlib.metadata.distributions(path=[p for p in sys.path if not p.startswith("/grader")]):
        try:
            name = str(dist.metadata["Name"] or "").lower().replace("_", "-")
            where = os.path.abspath(str(dist.locate_file("")))
            points = [ep for ep in dist.entry_points if ep.group == "pytest11"]
        except Exception:  # noqa: BLE001 - a broken distribution's metadata: not a plugin
            continue
        if not points or name in names or _students_place(where):
            continue
        names.add(name)
        for ep in points:
            try:
                plugin = ep.load()
                if any(plugin is p for p in plugins):
                    continue
                PytestPluginManager().register(plugin, name=ep.name)  # pytest's own validation, on a throwaway manager
                plugins.append(plugin)
            except Exception as exc:  # noqa: BLE001
                sys.stderr.write(f"PytestJudge: the image's pytest plugin {ep.name} ({ep.value}) was not loaded: {type(exc).__name__}: {exc}\n")
    return plugins


_PLUGINS = _image_plugins()


# -- what decides an outcome, by identity ---------------------------------------------------------
_BUILTINS = ("open", "print", "len", "isinstance", "issubclass", "type", "str", "int", "float", "bool", "bytes", "list", "dict",
             "tuple", "set", "frozenset", "repr", "sorted", "reversed", "abs", "round", "sum", "min", "max", "all", "any", "range",
             "zip", "map", "filter", "enumerate", "eval", "exec", "compile", "__import__", "getattr", "hasattr", "setattr", "id",
             "hash", "iter", "next", "callable", "vars", "globals", "AssertionError", "Exception", "BaseException")
_WATCHED = [
    (_pytest.runner, ("call_and_report", "runtestprotocol", "call_runtest_hook", "pytest_runtest_makereport",
                      "pytest_runtest_call", "pytest_runtest_setup", "pytest_runtest_teardown", "check_interactive_exception")),
    (_pytest.runner.CallInfo, ("from_call", "__init__")),
    (_pytest.reports, ("TestReport", "CollectReport")),
    (_pytest.reports.TestReport, ("from_item_and_call", "__init__", "passed", "failed", "skipped", "_to_json")),
    (_pytest.reports.BaseReport, ("passed", "failed", "skipped")),
    (_pytest.python, ("pytest_pyfunc_call", "Function", "Module", "Class")),
    (_pytest.python.Function, ("runtest", "setup", "_getobj", "obj")),
    # unittest.TestCase tests: their failures reach the judge through these (item._excinfo).
    (_pytest.unittest.TestCaseFunction, ("runtest", "_addexcinfo", "addError", "addFailure", "addSkip", "addExpectedFailure",
                                         "addUnexpectedSuccess", "addSuccess", "startTest", "stopTest", "setup", "teardown")),
    (unittest.case.TestCase, ("run", "__call__", "_baseAssertEqual", "_getAssertEqualityFunc", "assertEqual", "assertTrue",
                              "assertFalse", "assertIn", "assertIs", "assertIsNone", "assertAlmostEqual", "assertNotEqual",
                              "assertRaises", "assertCountEqual", "assertDictEqual", "assertListEqual", "fail", "failureException")),
    (unittest.case, ("_Outcome", "TestCase")),
    (_pytest.main.Session, ("perform_collect", "genitems")),
    (_pytest.main, ("pytest_runtestloop",)),
    (pluggy._callers, ("_multicall",)),
    (pluggy._manager.PluginManager, ("_hookexec", "register", "subset_hook_caller")),
    (pluggy._hooks.HookCaller, ("__call__", "call_historic", "get_hookimpls", "_add_hookimpl")),
    (pluggy._hooks.HookImpl, ("__init__",)),
    (os, ("_exit", "write")),
    # What a task's tests use to read what the student made: an answer module that patched one at
    # import (Path.read_text returning the expected text) would decide the outcome (issue 19 b).
    (builtins, _BUILTINS),
    (io, ("open", "open_code", "TextIOWrapper", "BufferedReader", "FileIO", "StringIO", "BytesIO")),
    (pathlib, ("Path", "PurePath", "PosixPath", "PurePosixPath")),
    (pathlib.Path, ("read_text", "read_bytes", "open", "exists", "is_file", "is_dir", "iterdir", "glob", "rglob", "stat",
                    "resolve", "samefile", "__new__", "_from_parts", "_make_child")),
    (pathlib.PurePath, ("__eq__", "__hash__", "__truediv__", "__str__", "__fspath__", "name", "suffix", "stem", "parts", "parent",
                        "__lt__", "as_posix", "joinpath", "with_suffix", "relative_to")),
    (os, ("open", "read", "fdopen", "listdir", "scandir", "stat", "lstat", "walk", "fspath", "getcwd", "environ", "popen",
          "system", "access", "readlink")),
    (os.path, ("exists", "isfile", "isdir", "join", "getsize", "abspath", "realpath", "basename", "dirname", "samefile")),
    (subprocess, ("run", "Popen", "check_output", "check_call", "call", "getoutput", "getstatusoutput", "CompletedProcess")),
    (subprocess.Popen, ("communicate", "wait", "__init__", "poll", "returncode")),
    (subprocess.CompletedProcess, ("__init__", "check_returncode")),
    (json, ("load", "loads", "dump", "dumps", "JSONDecoder", "JSONEncoder")),
    (json.decoder.JSONDecoder, ("decode", "raw_decode")),
    (re, ("match", "search", "fullmatch", "findall", "finditer", "sub", "split", "compile")),
    (math, ("isclose", "isfinite", "isnan")),
    (operator, ("eq", "ne")),
    (csv, ("reader", "DictReader")),
    (hashlib, ("md5", "sha1", "sha256", "file_digest")),
    (shutil, ("which", "copyfile")),
]
_HOOKS = ("pytest_runtest_protocol", "pytest_runtest_makereport", "pytest_runtest_call", "pytest_runtest_setup",
          "pytest_runtest_teardown", "pytest_pyfunc_call", "pytest_runtest_logreport", "pytest_report_teststatus",
          "pytest_collection_modifyitems", "pytest_collection", "pytest_collect_file", "pytest_pycollect_makeitem",
          "pytest_pycollect_makemodule", "pytest_make_collect_report", "pytest_generate_tests", "pytest_itemcollected",
          "pytest_deselected", "pytest_runtestloop", "pytest_sessionfinish", "pytest_fixture_setup", "pytest_assertrepr_compare",
          "pytest_exception_interact", "pytest_runtest_logfinish", "pytest_ignore_collect")


def _attrs():
    # The raw attributes (getattr_static: a classmethod is the same object every time, where
    # getattr makes a fresh bound method), kept as objects so an id cannot be reused.
    seen = {}
    for owner, names in _WATCHED:
        for name in names:
            seen[f"{getattr(owner, '__name__', owner)}.{name}"] = _static(owner, name, None)
    return seen


def _hookimpls(pm):
    seen = {}
    for name in _HOOKS:
        caller = getattr(pm.hook, name, None)
        impls = pluggy._hooks.HookCaller.get_hookimpls(caller) if caller is not None else []
        seen[name] = tuple((impl.plugin_name, impl.function, bool(impl.hookwrapper or impl.wrapper)) for impl in impls)
    return seen


class _Watch:
    def __init__(self):
        self.attrs = _attrs()
        self.stdlib = {n: m for n, m in sys.modules.items() if n.split(".")[0] in sys.stdlib_module_names and n != "__main__"}
        self.pm = None
        self.impls = None
        self.plugins = None
        self.reported = set()

    def arm(self, pm):
        self.pm = pm
        self.impls = _hookimpls(pm)
        self.plugins = {_id(p) for p in pm.get_plugins()}

    def check(self, where):
        changed = [k for k, v in _attrs().items() if self.attrs.get(k) is not v]
        if self.pm is not None:
            now = _hookimpls(self.pm)
            changed += [f"hook {k}" for k in self.impls if now.get(k) != self.impls[k]]
            extra = [p for p in self.pm.get_plugins() if _id(p) not in self.plugins]
            changed += [f"plugin {self.pm.get_name(p) or type(p).__name__}" for p in extra]
        for module in _TEST_MODULES:
            if module.__dict__.get("_proctor_eq") is not _judge_eq or module.__dict__.get("_proctor_ne") is not _judge_ne:
                changed.append(f"the judge's assert check in {module.__name__}")
            changed += [f"the test module's {name}" for name in _rebound(module, _IMPORTS.get(getattr(module, "__file__", None), []))]
        changed += [f"sys.modules[{name!r}]" for name, mod in self.stdlib.items() if sys.modules.get(name) is not mod]
        fresh = sorted(set(changed) - self.reported)
        if fresh:
            self.reported.update(fresh)
            emit("tamper", what="patched " + ", ".join(fresh[:8]), where=where)
        return not changed


WATCH = _Watch()
_TEST_MODULES = []
_IMPORTS = {}
_GRADER_CODE = []  # every code object compiled from the grader's files (kept, so an id is never reused)
_GRADER_CODE_IDS = set()


def _keep_code(code):
    """A test counts as the grader's only if its function was compiled here from the grader's
    files: student code can forge a code object's file name (compile(..., "/tests/x.py")), not this."""
    todo = [code]
    while todo:
        c = todo.pop()
        if _id(c) in _GRADER_CODE_IDS:
            continue
        _GRADER_CODE.append(c)
        _GRADER_CODE_IDS.add(_id(c))
        todo += [k for k in c.co_consts if isinstance(k, type(c))]


# -- always-equal objects in asserts ---------------------------------------------------------------
class _Stranger:
    """Never seen by student code before: an honest __eq__ cannot say it equals it."""

    __slots__ = ()

    def __eq__(self, other):
        return NotImplemented

    __hash__ = object.__hash__


_PLAIN = (int, float, complex, str, bytes, bool, type(None))


_BUILTIN_BASES = (bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict)


def _probe_of(value):
    """For an object of a subclass of a builtin type: a fresh value of that builtin type that it
    cannot honestly equal (a random number, a random string, a container holding a stranger), so
    an `int` subclass whose == is true for every int is caught too; None for other objects."""
    import random

    base = next((b for b in _BUILTIN_BASES if isinstance(value, b)), None)
    if base is None or type(value) is base:
        return None
    if base in (int, bool):
        return int(value) + (1 << 80) + random.getrandbits(64)
    if base is float:
        return float(value) + 1e6 + random.random() if value == value and abs(float(value)) < 1e300 else random.random()
    if base is complex:
        return complex(value) + complex(1e6 + random.random(), 1.0)
    if base is str:
        return str.__add__(str(str.__str__(value)), "\x00proctor-" + os.urandom(8).hex())
    if base is bytes:
        return bytes(value) + b"\x00proctor-" + os.urandom(8)
    if base is dict:
        return {_Stranger(): _Stranger()}
    return base([_Stranger()])


def _lies(value, op):
    """Whether a non-plain object's == says True to a fresh stranger (op "eq") (or, for a subclass
    of a builtin type, to a fresh value of that type it cannot equal), or its != says True to
    itself (op "ne"): what no honest comparison does."""
    try:
        if op == "eq":
            probes = [_Stranger()]
            typed = _probe_of(value)
            if typed is not None:
                probes.append(typed)
            for probe in probes:
                said = value == probe
                if said is not NotImplemented and bool(said):
                    return True
            return False
        said = value != value
        return said is not NotImplemented and bool(said)
    except Exception:  # noqa: BLE001 - raising (numpy's ambiguous truth, ...) is not claiming anything
        return False


def _claims_anything(value, op, depth=0, budget=None):
    """The type name of an object (or one inside plain containers) that compares as anything."""
    budget = budget if budget is not None else [2000]
    budget[0] -= 1
    if budget[0] < 0 or depth > 20 or type(value) in _PLAIN:
        return None
    if type(value) in (list, tuple, set, frozenset, dict):
        items = [x for kv in value.items() for x in kv] if type(value) is dict else value
        for item in items:
            found = _claims_anything(item, op, depth + 1, budget)
            if found:
                return found
        return None
    if _lies(value, op):
        cls = type(value)
        return f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', '?')}"
    return None


def _checked(op, left, right, author):
    result = left == right if op == "eq" else left != right
    for index, side in enumerate((left, right)):
        if index in author:
            continue  # written by the test's author as `mock.ANY`: compares as anything on purpose
        found = _claims_anything(side, op)
        if found:
            sign = "==" if op == "eq" else "!="
            emit("always_equal", type=str(found)[:200], op=sign, test=CURRENT[0])
            raise AssertionError(f"an operand of {sign} ({str(found)[:200]}) compares as anything; refused by the judge")
    return result


def _judge_eq(left, right, author=()):
    return _checked("eq", left, right, author)


def _judge_ne(left, right, author=()):
    return _checked("ne", left, right, author)


def _author_any(node):
    return (isinstance(node, ast.Name) and node.id == "ANY") or (isinstance(node, ast.Attribute) and node.attr == "ANY")


class _AssertEq(ast.NodeTransformer):
    """`assert a == b` -> `assert _proctor_eq(a, b)` (chains and other operators left alone)."""

    def visit_Assert(self, node):
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
            fn = "_proctor_eq" if isinstance(test.ops[0], ast.Eq) else "_proctor_ne"
            sides = (test.left, test.comparators[0])
            author = ast.Tuple(elts=[ast.Constant(i) for i, side in enumerate(sides) if _author_any(side)], ctx=ast.Load())
            node.test = ast.copy_location(ast.Call(func=ast.Name(id=fn, ctx=ast.Load()), args=[*sides, author], keywords=[]), test)
        return node


def _imports(tree):
    """(name bound in the test module, module, attribute or None) for its top-level absolute imports."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            found += [(a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0], None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(a.asname or a.name, node.module, a.name) for a in node.names if a.name != "*"]
    return found


def _rebound(module, imports):
    """Names of the test module that no longer are what its imports bound (a student's module,
    imported by the test, rebinding `test_x.Path` to a fake); the student's own modules are theirs."""
    wrong = []
    for bound, source, attr in imports:
        real = sys.modules.get(source)
        origin = getattr(real, "__file__", None) or ""
        if real is None or origin.startswith(_WORKDIR + "/"):
            continue
        expected = real if attr is None else _static(real, attr, None)
        if attr is not None and expected is None:
            continue  # a submodule bound by `from pkg import sub`, or a lazy attribute: not checked
        if module.__dict__.get(bound) is not expected:
            wrong.append(f"{module.__name__}.{bound}")
    return wrong


class _TestLoader(importlib.machinery.SourceFileLoader):
    def source_to_code(self, data, path, *, _optimize=-1):
        _IMPORTS[path] = _imports(ast.parse(data, filename=path))
        tree = _AssertEq().visit(ast.parse(data, filename=path))
        ast.fix_missing_locations(tree)
        code = compile(tree, path, "exec", dont_inherit=True)
        _keep_code(code)
        return code

    def get_data(self, path):
        if path in _SOURCES:
            return _SOURCES[path].encode()
        return super().get_data(path)

    def exec_module(self, module):
        module.__dict__["_proctor_eq"] = _judge_eq
        module.__dict__["_proctor_ne"] = _judge_ne
        _TEST_MODULES.append(module)
        super().exec_module(module)

    def set_data(self, path, data, *, _mode=0o666):
        return None


class _TestFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not spec.origin or not spec.origin.startswith(_TESTS + "/") or not spec.origin.endswith(".py"):
            return None
        return importlib.util.spec_from_file_location(name, spec.origin, loader=_TestLoader(name, spec.origin),
                                                      submodule_search_locations=spec.submodule_search_locations)


# Modules a task's tests import from an installed distribution, never from the student's workdir
# (a fake `numpy` whose allclose is always True, a fake `pytest_timeout`): besides these names, the
# standard library's and every `pytest_*` plugin's (whoever imports them: the tests, or the student's
# module first, which would leave its fake in sys.modules for the tests).
_THIRD_PARTY = {"numpy", "pandas", "scipy", "sklearn", "torch", "tensorflow", "jax", "requests", "yaml", "hypothesis", "attr",
                "attrs", "pydantic", "polars", "pyarrow", "matplotlib", "PIL", "cv2", "bs4", "lxml", "sympy", "networkx",
                "deepdiff", "jsonschema", "toml", "tomli", "dateutil", "pytz", "six", "typing_extensions", "xmltodict", "psutil",
                "docker", "regex", "numba", "httpx", "flask", "fastapi", "django", "sqlalchemy", "redis", "boto3", "click",
                "rich", "tqdm", "pexpect", "freezegun", "responses", "mock", "_pytest", "pytest", "pluggy", "py"}


def _not_the_students(name):
    return name in _THIRD_PARTY or name in sys.stdlib_module_names or name.startswith("pytest_")


def _installed_in_workdir(name, places=None):
    """Whether pip put `name` in a place of the student's (`pip install --target` in the workdir,
    `--user` in its user site): a dist-info whose RECORD lists it. An honest student may do that
    where the image lacks a package: refused, not flagged."""
    prefix = name.replace(".", "/")
    for place in places if places is not None else [_WORKDIR, _USER_SITE]:
        try:
            for entry in os.scandir(place):
                if entry.name.endswith(".dist-info") and entry.is_dir(follow_symlinks=False):
                    with open(os.path.join(entry.path, "RECORD"), encoding="utf-8", errors="replace") as f:
                        if any(line.startswith((prefix + "/", prefix + ".py,")) for line in f):
                            return True
        except OSError:
            continue
    return False


def _namespace(name, portions):
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = portions  # a plain list: never recomputed from sys.path
    return spec


_CODE_SUFFIXES = tuple(importlib.machinery.all_suffixes())


def _holds_code(directory, budget=5000):
    """Whether a directory holds a module Python could import (a .py, .pyc or extension file, at
    any depth), looking at no more than `budget` entries (more counts as code). Python makes any
    directory on the path a namespace portion, so a data directory of the tests (`report/golden.txt`
    beside `test_report.py`) would shadow the student's `report.py`: a fresh attacker's false flag."""
    todo, seen = [directory], 0
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > budget or entry.name.endswith(_CODE_SUFFIXES):
                return True
            if entry.name != "__pycache__" and entry.is_dir(follow_symlinks=False):
                todo.append(entry.path)
    return False


class _WorkdirGuard(importlib.abc.MetaPathFinder):
    """Where a module is searched for in places of the student's (the workdir, its user site, an
    image PYTHONPATH under it) as well as the runtime's own: a name the runtime has, a regular
    module or a namespace package (google.*, mpl_toolkits), is always the runtime's; a top-level
    name found only in the student's places is theirs only when it may be."""

    def find_spec(self, name, path=None, target=None):
        search = sys.path if path is None else list(path)
        theirs = [p for p in search if _students_place(p)]
        if not theirs:
            return None
        ours = [p for p in search if not _students_place(p)]
        runtime = importlib.machinery.PathFinder.find_spec(name, ours) if ours else None
        if runtime is not None and runtime.origin is None and runtime.submodule_search_locations is not None:
            code = [p for p in runtime.submodule_search_locations if _holds_code(p)]
            runtime.submodule_search_locations = code
            runtime = runtime if code else None  # a data directory (tests/report/golden.txt) is no package of the runtime's
        if runtime is not None and not (runtime.origin is None and runtime.submodule_search_locations is not None):
            return runtime  # a regular module of the runtime: a student's of the same name never comes first
        if runtime is not None:
            # A namespace package of the runtime: the student's portions (plain directories) join it
            # after the runtime's, so they add submodules but never replace one the runtime has; a
            # regular package of theirs is only a portion (its __init__ is not run), a module is refused.
            portions = list(runtime.submodule_search_locations)
            student = importlib.machinery.PathFinder.find_spec(name, theirs)
            if student is not None and student.submodule_search_locations is not None:
                portions += [p for p in student.submodule_search_locations if p not in portions]
            if student is not None and student.origin is not None:
                emit("shadowed", module=name, test=CURRENT[0] or "collection", runtime="namespace",
                     installed=_installed_in_workdir(name, theirs + [_WORKDIR, _USER_SITE]))
            return _namespace(name, portions)
        if path is not None or "." in name:
            return None  # a submodule the runtime lacks: its parent's (the student's own package, or a portion of theirs)
        if importlib.machinery.PathFinder.find_spec(name, theirs) is None or not _not_the_students(name):
            return None
        emit("shadowed", module=name, test=CURRENT[0] or "collection", installed=_installed_in_workdir(name, theirs + [_WORKDIR]))
        raise ImportError(f"No module named {name!r} in the grading runtime; PytestJudge does not take it from the student's workdir")


# -- the judge's plugin ----------------------------------------------------------------------------
CURRENT = [None]


class JudgePlugin:
    def __init__(self):
        self.raised = {}

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection(self, session):
        WATCH.arm(session.config.pluginmanager)
        return (yield)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        emit("collected", ids=[item.nodeid for item in session.items][:5000])
        WATCH.check("collection")

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        CURRENT[0] = item.nodeid
        self.raised[item.nodeid] = {}
        _restore_child_env()
        emit("start", id=item.nodeid)
        try:
            return (yield)
        finally:
            seen = self.raised.get(item.nodeid, {})
            ran = "call" in seen
            failed = [phase for phase, raised in seen.items() if raised]
            obj = getattr(item, "obj", None)
            code = getattr(obj, "__code__", None)
            own = code is not None and _id(code) in _GRADER_CODE_IDS  # compiled by _TestLoader from the grader's files
            if "runtest" in getattr(item, "__dict__", {}):
                emit("tamper", what="the test item's runtest was replaced", where=item.nodeid)
            intact = WATCH.check(item.nodeid)
            outcome = "passed" if ran and not failed and intact and own else ("error" if not ran else "failed")
            emit("end", id=item.nodeid, outcome=outcome, raised=failed, ran=ran, graders=own)
            CURRENT[0] = None

    def _observe(self, item, phase):
        try:
            result = yield
        except BaseException as exc:
            self.raised.setdefault(item.nodeid, {})[phase] = f"{type(exc).__name__}"
            raise
        # A unittest.TestCase runs inside pytest's TestCaseFunction, which catches the test's
        # failure (addFailure/addError/addSkip) into item._excinfo instead of raising it: a failed
        # assertEqual raised nothing here (a fresh attacker's hack, the null agent passing).
        caught = item.__dict__.get("_excinfo") if phase == "call" else None
        if caught:
            self.raised.setdefault(item.nodeid, {})[phase] = type(getattr(caught[0], "value", None)).__name__
            return result
        self.raised.setdefault(item.nodeid, {})[phase] = None
        return result

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item):
        return (yield from self._observe(item, "setup"))

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item):
        return (yield from self._observe(item, "call"))

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item, nextitem):
        return (yield from self._observe(item, "teardown"))

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo):
        # KeyboardInterrupt or pytest.exit() from code under test: pytest stops and returns normally.
        emit("interrupted", error=type(excinfo.value).__name__, where=CURRENT[0] or "collection")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report):
        seen = self.raised.get(report.nodeid, {})
        if report.when in seen and report.outcome == "passed" and seen[report.when]:
            emit("tamper", what=f"pytest's {report.when} report says passed where the judge saw {seen[report.when]}", where=report.nodeid)


def _end_own_children():
    """Kill and reap what the tests started and left running as this process's plain children (a
    server a test did not stop): not the student's doing. A process that left the session (setsid)
    or was double-forked away is left alone: the judge sees it from outside and flags it
    (`processes_left_in_grading`)."""
    me, session = os.getpid(), os.getsid(0)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[1]) == me and int(fields[3]) == session:
                os.kill(int(name), 9)
                os.waitpid(int(name), 0)
        except (OSError, ValueError, IndexError, ChildProcessError):
            continue


def main():
    sys.meta_path.insert(0, _TestFinder())
    sys.meta_path.insert(1, _WorkdirGuard())
    # The student's modules are importable (`from solution import f`), but last: nothing of
    # theirs can shadow the standard library, pytest or an installed package.
    # The image's PYTHONPATH entries that are the student's (/app/src) come just before it, the user
    # site after it.
    sys.path.extend(p for p in [*[q for q in _IMAGE_PATH if _students_place(q)], _WORKDIR, _USER_SITE] if p not in sys.path)
    args = ["-c", "/grader/pytest.ini", "--rootdir", _TESTS, "--noconftest", "-p", "no:cacheprovider",
            "-p", "no:stepwise", "-p", "no:pastebin", "-p", "no:junitxml", "-p", "no:doctest", "--assert=plain",
            "-q", "-rN", "--color=no", "-o", "console_output_style=classic", *SETTINGS["files"]]
    emit("begin", python=sys.version.split()[0], pytest=pytest.__version__)
    try:
        code = pytest.main(args, plugins=[JudgePlugin(), *_PLUGINS])
    except BaseException as exc:  # noqa: BLE001
        emit("crash", error=type(exc).__name__)
        code = 3
    WATCH.check("end")
    _end_own_children()
    emit("finish", exit=int(code))
    os._exit(0)


main()

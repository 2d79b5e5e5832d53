"""Student code runs in a fresh sandbox as the student, and only bounded strict JSON comes back.

Every attack below is real student code, run by the real server inside a proven sandbox."""

from __future__ import annotations

import os
import resource
import textwrap
import time
from pathlib import Path

import pytest

import proctor
from proctor.judges.student_code import StudentCallError, StudentRunner, decode_reply, run_student
from proctor.sandbox import SandboxLimits

MiB = 1024 * 1024

# Student code that reaches into the server's own frame for its reply fd and the request id: the
# strongest forger there is, since student code runs in the server's process.
FORGE = '''
import os, sys

def _channel():
    f = sys._getframe()
    while f is not None and "reply_fd" not in f.f_locals:
        f = f.f_back
    return f.f_locals["reply_fd"], f.f_locals["rid"]

def forge(value_text):
    fd, rid = _channel()
    os.write(fd, ('{"id": "%s", "ok": true, "value": %s}\\n' % (rid, value_text)).encode())
    return "honest"

def forge_nested(depth):
    fd, rid = _channel()
    os.write(fd, ('{"id": "%s", "ok": true, "value": %s}\\n' % (rid, "[" * depth + "]" * depth)).encode())
    return "honest"

def print_forged_reply():
    fd, rid = _channel()
    line = '{"id": "%s", "ok": true, "value": 999}' % rid
    print(line, flush=True)          # through sys.stdout
    os.write(1, (line + "\\n").encode())  # and straight to fd 1, as a C extension would
    return 1

def stale_writer():
    import threading, time
    fd, rid = _channel()
    def spam():
        time.sleep(0.05)  # after the call has returned: from now on this id is stale
        for _ in range(3000):
            os.write(fd, ('{"id": "%s", "ok": true, "value": 999}\\n' % rid).encode())
            time.sleep(0.0005)
    threading.Thread(target=spam, daemon=True).start()
    return 1
'''

SOLUTION = '''
import os, sys, time

def add(a, b):
    return a + b

def whoami():
    return os.getuid()

def listdir(path):
    return sorted(os.listdir(path))

def peek(path):
    with open(path) as f:
        return f.read()

class AlwaysEqual:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__

def always_equal():
    return AlwaysEqual()

class Sneaky(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__

def sneaky_int():
    return Sneaky(5)

def nan():
    return float("nan")

def exit_inside():
    sys.exit(0)

def os_exit():
    os._exit(0)

def segfault():
    import ctypes
    ctypes.string_at(0)

def hang():
    while True:
        pass

def sleep_forever():
    time.sleep(3600)

def fork_then_die():
    if os.fork() == 0:
        time.sleep(3600)  # the child keeps the reply pipe open
    os._exit(0)

def print_lots(megabytes):
    chunk = "x" * MiB
    for _ in range(megabytes):
        print(chunk)
    return 42

MiB = 1024 * 1024

def big_reply(megabytes):
    return "y" * (megabytes * MiB)

def busy(seconds):
    end = time.process_time() + seconds
    n = 0
    while time.process_time() < end:
        n += 1
    return n

def read_stdin():
    return sys.stdin.read()

def raises():
    raise KeyError("nope")
'''


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture(scope="module")
def submission(tmp_path_factory) -> Path:
    return write_tree(tmp_path_factory.mktemp("submission"), {
        "solution.py": SOLUTION,
        "forger.py": FORGE,
        "exits_at_import.py": "import sys\nsys.exit(0)\ndef f():\n    return 1\n",
    })


@pytest.fixture(scope="module")
def runner(confinement, submission):
    with StudentRunner(submission, call_timeout_s=10) as r:
        yield r


@pytest.fixture
def fresh_runner(confinement, submission):
    with StudentRunner(submission, call_timeout_s=10) as r:
        yield r


def test_a_correct_call_returns_its_value(runner):
    call = runner.call("solution:add", 2, 3)
    assert call.ok and call.value == 5 and call.error is None
    assert runner.module("solution").add(a=20, b=22) == 42
    assert runner.value("solution:add", [1], [2]) == [1, 2]


def test_student_code_runs_as_the_sandbox_uid_not_root(runner):
    assert runner.value("solution:whoami") == runner.uid != 0
    assert runner.exec("import os\nresult = [os.getuid(), os.geteuid(), os.getgroups()]").value == [runner.uid, runner.uid, []]


def test_the_grader_mount_holds_only_the_server_and_grader_files_are_unreachable(runner):
    assert runner.value("solution:listdir", "/grader") == ["server.py"]
    for grader_file in (__file__, proctor.__file__):
        call = runner.call("solution:peek", grader_file)
        assert not call.ok and call.error.startswith("FileNotFoundError"), call


def test_an_always_equal_object_cannot_cross(runner):
    call = runner.call("solution:always_equal")
    assert not call.ok and "AlwaysEqual is not JSON" in call.error
    with pytest.raises(StudentCallError, match="not JSON"):
        runner.module("solution").always_equal()


def test_an_int_subclass_with_a_lying_eq_cannot_cross(runner):
    call = runner.call("solution:sneaky_int")
    assert not call.ok and "Sneaky is not JSON" in call.error


def test_nan_is_refused_by_the_server(runner):
    call = runner.call("solution:nan")
    assert not call.ok and "NaN" in call.error


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_hand_written_non_finite_number_on_the_channel_is_refused_by_the_harness(runner, token):
    call = runner.call("forger:forge", token)
    assert not call.ok and call.error.startswith("malformed reply"), call
    assert runner.value("solution:add", 1, 1) == 2  # the next call gets a clean channel


def test_a_forged_reply_nested_too_deeply_is_refused(runner):
    call = runner.call("forger:forge_nested", 200_000)
    assert not call.ok and "malformed reply" in call.error


def test_student_prints_cannot_forge_a_reply(runner):
    # With fd 1 still on the channel the forged 999 (with the right id) would be read first.
    assert runner.value("forger:print_forged_reply") == 1
    # The forged line went to stderr, which a drain thread reads on its own schedule.
    end = time.monotonic() + 5.0
    while '"value": 999' not in runner.stderr_tail and time.monotonic() < end:
        time.sleep(0.01)
    assert '"value": 999' in runner.stderr_tail


def test_a_leftover_thread_writing_stale_replies_does_not_change_later_results(fresh_runner):
    assert fresh_runner.value("forger:stale_writer") == 1
    end = time.monotonic() + 1.0
    results = []
    while time.monotonic() < end:  # calls while the thread spams the channel
        results.append(fresh_runner.value("solution:add", len(results), 1))
    assert results == [i + 1 for i in range(len(results))] and len(results) > 50
    assert fresh_runner.servers_started == 1


def test_sys_exit_at_import_is_a_crash_and_the_next_call_gets_a_fresh_server(runner):
    started = runner.servers_started
    call = runner.call("exits_at_import:f")
    assert not call.ok and call.crashed and not call.timed_out
    assert runner.value("solution:add", 2, 2) == 4
    assert runner.servers_started == started + 1


@pytest.mark.parametrize("target", ["solution:exit_inside", "solution:os_exit"])
def test_exiting_inside_the_function_is_a_crash(runner, target):
    call = runner.call(target)
    assert not call.ok and call.crashed and call.value is None
    assert "exited (status 0)" in call.error


def test_a_segfault_is_a_crash_naming_the_signal(runner):
    call = runner.call("solution:segfault")
    assert call.crashed and "signal 11" in call.error


def test_a_forked_child_holding_the_channel_does_not_hide_a_crash(runner):
    call = runner.call("solution:fork_then_die")
    assert call.crashed and not call.timed_out and call.wall_s < 2


def test_an_oom_kill_is_a_crash_that_says_so(confinement, submission):
    with StudentRunner(submission, limits=SandboxLimits(memory_bytes=64 * MiB)) as small:
        call = small.exec("blob = b'x' * (512 * 1024 * 1024)\nresult = len(blob)")
        assert call.crashed and "out of memory" in call.error
        assert small.value("solution:add", 1, 2) == 3


@pytest.mark.parametrize("target", ["solution:hang", "solution:sleep_forever"])
def test_a_hanging_function_is_cut_at_its_timeout(runner, target):
    call = runner.call(target, timeout=0.5)
    assert call.timed_out and not call.ok and "timed out after 0.5s" in call.error
    assert 0.5 <= call.wall_s < 2
    assert runner.value("solution:add", 3, 3) == 6


def test_printing_100_mb_cannot_corrupt_the_channel_or_blow_memory(runner):
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    call = runner.call("solution:print_lots", 100)
    assert call.ok and call.value == 42
    assert len(runner.stderr_tail.encode()) <= 8 * 1024
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert peak_after - peak_before < 50 * MiB


def test_a_10_mb_reply_is_refused_as_too_large(runner):
    call = runner.call("solution:big_reply", 10)
    assert not call.ok and "reply too large" in call.error
    assert runner.value("solution:add", 4, 4) == 8


def test_a_busy_loop_has_positive_wall_and_cpu_time(runner):
    call = runner.call("solution:busy", 0.2)
    assert call.ok
    assert call.cpu_s >= 0.15 and call.wall_s >= 0.15


def test_reading_stdin_cannot_swallow_requests(runner):
    assert runner.value("solution:read_stdin") == ""
    assert runner.value("solution:add", 5, 5) == 10


def test_a_student_exception_comes_back_as_text(runner):
    call = runner.call("solution:raises")
    assert not call.ok and not call.crashed and call.error == "KeyError: 'nope'"
    with pytest.raises(StudentCallError, match="solution:raises: KeyError"):
        runner.value("solution:raises")
    assert not runner.call("solution:no_such_function").ok
    assert not runner.call("not a target").ok


def test_arguments_that_are_not_json_are_the_authors_error(runner):
    with pytest.raises(ValueError, match="plain JSON"):
        runner.call("solution:add", object(), 1)


class SystemPythonRunner(StudentRunner):
    """The server under /usr/bin/python3, which (unlike a venv) has a user site in $HOME=/workdir."""

    @property
    def python(self) -> str:
        return "/usr/bin/python3"


USER_SITE = ".local/lib/python3.11/site-packages"


@pytest.mark.parametrize("runner_class", [StudentRunner, SystemPythonRunner], ids=["runtime", "system-python"])
def test_planted_start_up_hooks_and_a_shadowing_json_module_are_never_loaded(confinement, tmp_path, runner_class):
    hook = "import builtins\nbuiltins.PWNED_{} = True\n"
    sub = write_tree(tmp_path, {
        "solution.py": "def add(a, b):\n    return a + b\n",
        "sitecustomize.py": hook.format("SITE"),
        "usercustomize.py": hook.format("USER"),
        "evil.pth": "import builtins; builtins.PWNED_PTH = True\n",
        f"{USER_SITE}/usercustomize.py": hook.format("HOME_USER"),
        f"{USER_SITE}/evil.pth": "import builtins; builtins.PWNED_HOME_PTH = True\n",
        "json.py": "raise SystemExit(0)\n",  # would kill the server if it ever shadowed json
        "importlib.py": "raise SystemExit(0)\n",
    })
    names = ("PWNED_SITE", "PWNED_USER", "PWNED_PTH", "PWNED_HOME_USER", "PWNED_HOME_PTH")
    with runner_class(sub) as r:
        assert r.value("solution:add", 2, 3) == 5
        seen = r.exec("import builtins, json\nresult = [n for n in names if hasattr(builtins, n)] + [json.__file__]", {"names": names})
        assert len(seen.value) == 1, seen
        assert not seen.value[0].startswith("/workdir")


def test_the_submission_is_owned_by_the_student(confinement, tmp_path):
    sub = write_tree(tmp_path, {"pkg/__init__.py": "", "pkg/mod.py": "def f():\n    return 'deep'\n"})
    with StudentRunner(sub) as r:
        assert r.value("pkg.mod:f") == "deep"
        st = os.stat(r.sandbox.workdir / "pkg" / "mod.py")
        assert (st.st_uid, st.st_mode & 0o777) == (r.uid, 0o644)


def test_run_student_is_a_one_shot_call(confinement, submission):
    start = time.monotonic()
    call = run_student(submission, "solution:add", 2, b=3)
    assert call.ok and call.value == 5
    assert time.monotonic() - start < 5


def test_decode_reply_is_strict():
    assert decode_reply(b'{"a": [1, 2.5, null, true]}') == {"a": [1, 2.5, None, True]}
    for bad in (b"NaN", b"[Infinity]", b"-Infinity", b"1e999", b"1" * 5000):
        with pytest.raises(ValueError):
            decode_reply(bad)

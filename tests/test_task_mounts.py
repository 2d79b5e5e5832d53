"""Task mounts: a task's own workdir (/app) and read-only data path, on the real sandbox, and the
whole workdir as the submission under the same strict custody as a declared path."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from proctor import ExactAnswer, Step, Task
from proctor.custody import WHOLE_WORKDIR, custody_point
from proctor.errors import ConfigError
from proctor.sandbox import Mount, SandboxSpec
from proctor.tasks import load_environment
from conftest import BOTH_RUNTIMES  # noqa: E402

# The sandbox tests run on both runtimes (`runtime` is parametrized); the model checks take none.
pytestmark = BOTH_RUNTIMES


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    (d / "key.txt").write_text("k-42\n")
    os.chmod(d, 0o755)
    os.chmod(d / "key.txt", 0o644)
    return d


def test_the_workdir_and_data_are_at_the_tasks_own_paths(make_sandbox, data):
    box = make_sandbox(SandboxSpec(workdir="/app", data_dir=str(data), data_at="/srv/input"))
    out = box.run("pwd; echo $HOME; cat /srv/input/key.txt; echo hi > /app/made && cat /app/made; "
                  "test -e /workdir && echo has-workdir || echo no-workdir; test -e /data && echo has-data || echo no-data")
    assert out.exit_code == 0, out.stderr
    assert out.text.split() == ["/app", "/app", "k-42", "hi", "no-workdir", "no-data"]
    assert (box.workdir / "made").read_text() == "hi\n"  # the host side of /app is the capped workdir


def test_the_student_cannot_write_or_replace_the_data(make_sandbox, data):
    box = make_sandbox(SandboxSpec(workdir="/app", data_dir=str(data), data_at="/srv/input"))
    out = box.run("echo x > /srv/input/key.txt; echo $?; touch /srv/input/new; echo $?; rm -f /srv/input/key.txt; echo $?; "
                  "mv /srv/input /srv/moved; echo $?; chmod 777 /srv/input; echo $?; cat /srv/input/key.txt")
    codes, key = out.text.split()[:-1], out.text.split()[-1]
    assert all(c != "0" for c in codes), out.text
    assert key == "k-42" and (data / "key.txt").read_text() == "k-42\n"
    assert sorted(os.listdir(data)) == ["key.txt"]


def test_the_parents_of_a_deep_workdir_are_enterable_and_not_writable(make_sandbox):
    box = make_sandbox(SandboxSpec(workdir="/srv/job/app"))
    out = box.run("cd /srv/job/app && pwd; touch /srv/job/x 2>/dev/null && echo wrote-parent || echo parent-ro")
    assert out.text.split() == ["/srv/job/app", "parent-ro"]


def test_the_whole_workdir_is_copied_as_one_item(make_sandbox, tmp_path):
    box = make_sandbox(SandboxSpec(workdir="/app"))
    box.run("mkdir -p /app/pkg/sub && echo a > /app/pkg/sub/a.py && echo b > /app/b.txt && echo c > /app/.hidden")
    point = custody_point(box, [WHOLE_WORKDIR], tmp_path / "custody")
    [item] = point.report.items
    assert (item.path, item.status, item.files) == ("*", "copied", 3)
    assert (tmp_path / "custody" / "pkg" / "sub" / "a.py").read_text() == "a\n"
    assert (tmp_path / "custody" / ".hidden").read_text() == "c\n"
    assert not point.misbehaviour


@pytest.mark.parametrize("plant, kind", [
    ("ln -s /etc/passwd /app/deep/passwd", "submission_symlink"),
    ("ln -s /srv/input /app/deep/data", "submission_symlink"),
    ("mkfifo /app/deep/pipe", "submission_special_file"),
])
def test_a_link_out_or_special_file_anywhere_refuses_the_whole_workdir(make_sandbox, tmp_path, data, plant, kind, runtime):
    box = make_sandbox(SandboxSpec(workdir="/app", data_dir=str(data), data_at="/srv/input"))
    box.run(f"echo 42 > /app/answer.txt && mkdir /app/deep && {plant}")
    dest = tmp_path / "custody"
    point = custody_point(box, [WHOLE_WORKDIR], dest)
    [item] = point.report.items
    if runtime == "gvisor" and kind == "submission_special_file":
        # gVisor keeps a named pipe in its own kernel: the host's workdir never holds one, so the
        # copy has no pipe (nothing special reaches the judge either way).
        assert item.status == "copied" and not (dest / "deep" / "pipe").exists()
        return
    assert (item.status, item.misbehaviour) == ("refused", kind)
    assert [e.kind for e in point.misbehaviour] == [kind]
    assert os.listdir(dest) == [], "a refused whole workdir left files behind"


def test_a_virtual_environment_in_the_whole_workdir_is_no_refusal(make_sandbox, tmp_path, runtime):
    # A fresh attacker's false flag: an honest `python3 -m venv` in the workdir (bin/python links to
    # the system's python) and node_modules/.bin style relative links refused the whole submission.
    box = make_sandbox(SandboxSpec(workdir="/app"))
    box.run("echo 42 > /app/answer.txt && python3 -m venv --without-pip /app/.venv"
            " && mkdir -p /app/node_modules/tool/bin /app/node_modules/.bin && echo x > /app/node_modules/tool/bin/cli.js"
            " && ln -s ../tool/bin/cli.js /app/node_modules/.bin/cli && ln -s answer.txt /app/latest"
            " && ln -s /app/answer.txt /app/node_modules/abs")  # an absolute link back into the workdir (a fresh attacker's F8)
    assert box.run("test -L /app/.venv/bin/python && echo link").text.strip() == "link"
    dest = tmp_path / "custody"
    point = custody_point(box, [WHOLE_WORKDIR], dest)
    [item] = point.report.items
    assert item.status == "copied" and not point.misbehaviour, item
    assert item.links_left_out >= 4 and (dest / "answer.txt").read_text() == "42\n"
    assert (dest / ".venv" / "pyvenv.cfg").is_file() and not (dest / ".venv" / "bin" / "python").exists()
    assert not any(p.is_symlink() for p in dest.rglob("*")), "a link reached the custody copy"


@pytest.mark.parametrize("plant", ["ln -s ../../etc/shadow /app/deep/up", "ln -s /usr/../etc/shadow /app/deep/sneak", "ln -s /tmp/key /app/deep/tmp",
                                   "ln -s /app/../etc/shadow /app/deep/back", "ln -s /apple/x /app/deep/prefix"])
def test_a_link_that_leaves_the_workdir_or_system_still_refuses(make_sandbox, tmp_path, plant):
    box = make_sandbox(SandboxSpec(workdir="/app"))
    box.run(f"echo 42 > /app/answer.txt && mkdir /app/deep && {plant}")
    point = custody_point(box, [WHOLE_WORKDIR], tmp_path / "custody")
    [item] = point.report.items
    assert (item.status, item.misbehaviour) == ("refused", "submission_symlink")


def test_a_hard_link_to_a_file_the_student_does_not_own_refuses_the_whole_workdir(make_sandbox, tmp_path):
    box = make_sandbox(SandboxSpec(workdir="/app"))
    box.run("echo mine > /app/mine.txt")
    secret = box.workdir / "starter.txt"  # a root-owned starter file, as a task places it
    secret.write_text("root's")
    os.link(secret, box.workdir / "answer.txt")  # what protected_hardlinks stops the student doing
    point = custody_point(box, [WHOLE_WORKDIR], tmp_path / "custody")
    [item] = point.report.items
    assert (item.status, item.misbehaviour) == ("refused", "submission_hardlink")
    assert os.listdir(tmp_path / "custody") == []


# -- bad input: clear errors naming the field ---------------------------------------------------------
def _task(**fields) -> Task:
    return Task(id="t", description="d", steps=[Step(instructions="i", submit=("a",), judge=ExactAnswer(path="a", expected="1"))], **fields)


@pytest.mark.parametrize("fields, words", [
    ({"workdir": "app"}, ["Task.workdir", "'app'", "absolute"]),
    ({"workdir": "/app/"}, ["Task.workdir", "normalised"]),
    ({"workdir": "/app/../etc"}, ["Task.workdir", "normalised"]),
    ({"workdir": "/"}, ["Task.workdir", "normalised"]),
    ({"workdir": "/usr/app"}, ["Task.workdir", "/usr"]),
    ({"workdir": "/tmp"}, ["Task.workdir", "/tmp"]),
    ({"workdir": "/opt"}, ["Task.workdir", "/opt/proctor"]),
    ({"data_at": "/etc/data"}, ["Task.data_at", "/etc"]),
    ({"data_at": "/proc"}, ["Task.data_at", "/proc"]),
    ({"workdir": "/app", "data_at": "/app/data"}, ["Task.workdir", "Task.data_at", "overlap"]),
    ({"workdir": "/srv", "data_at": "/srv"}, ["overlap"]),
])
def test_bad_task_paths_are_refused_naming_the_field(fields, words):
    with pytest.raises(ValidationError) as info:
        _task(**fields)
    text = str(info.value)
    assert all(w in text for w in words), text


def test_a_mount_over_the_tasks_workdir_is_refused():
    with pytest.raises(ValidationError, match="mount target '/app/x' overlaps SandboxSpec.workdir '/app'"):
        SandboxSpec(workdir="/app", mounts=(Mount(source="/tmp", target="/app/x"),))


def test_the_whole_workdir_must_be_declared_alone():
    with pytest.raises(ValidationError, match="declare it alone"):
        Step(instructions="i", submit=("*", "a"), judge=ExactAnswer(path="a", expected="1"))


def test_the_default_prompt_names_the_tasks_own_paths():
    task = _task(workdir="/app", data_at="/srv/input")
    assert "/app" in task.system_prompt and "/srv/input" in task.system_prompt and "/workdir" not in task.system_prompt


def test_tools_and_relative_paths_start_at_the_tasks_workdir(confinement, tmp_path):
    from proctor import Script
    from proctor.testing import rollout

    import sys
    sys.path.insert(0, str(Path(__file__).parent / "envs"))
    from pytask import SOLUTION

    script = Script(name="relative", turns=[
        {"tool": "write_file", "arguments": {"path": "solution.py", "content": SOLUTION}},
        {"tool": "bash", "arguments": {"command": "pwd; ls"}},
        {"tool": "read_file", "arguments": {"path": "solution.py"}},
        {"tool": "submit", "arguments": {}}])
    result = rollout(Path(__file__).parent / "envs" / "pytask", "adder", script, tmp_path)
    assert (result.status, result.score) == ("completed", 1.0), result.errors


def test_an_environment_with_a_bad_workdir_fails_to_load_with_a_clear_message(tmp_path):
    env = tmp_path / "env"
    env.mkdir()
    (env / "__init__.py").write_text(textwrap.dedent("""
        from proctor import ExactAnswer, Step, Task
        TASKS = [Task(id="t", description="d", workdir="/usr/local/app",
                      steps=[Step(instructions="i", submit=("a",), judge=ExactAnswer(path="a", expected="1"))])]
    """))
    with pytest.raises(ConfigError) as info:
        load_environment(str(env))
    assert "Task.workdir '/usr/local/app'" in str(info.value) and "/usr" in str(info.value)

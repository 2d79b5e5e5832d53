"""Task images: built offline from a local base with buildah, cached by content, run as the
student's root with every protection of the plain sandbox (the isolation tests rerun over an
image root: tests/test_sandbox_isolation.py, runtime `image`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from proctor.errors import ImageError
from proctor.images import TaskImage, prepare
from proctor.images.build import base_images
from proctor.sandbox import SandboxSpec, get_backend


def test_from_lines_name_the_base_images_and_skip_stages():
    text = "FROM a:1 AS build\nRUN x\nFROM --platform=linux/amd64 b AS two\nFROM build\nFROM scratch\nFROM $X\n"
    assert base_images(text) == ["a:1", "b"]


def test_a_task_image_names_one_source():
    with pytest.raises(ValueError, match="either"):
        TaskImage()
    with pytest.raises(ValueError, match="absolute"):
        TaskImage(context="rel/dir")


def test_image_builds_offline_from_the_local_base_and_the_second_build_is_a_cache_hit(image_store, image_context, image_root):
    assert os.path.exists(image_root.root) and image_root.workdir == "/app"
    assert image_root.env["TASK_FLAVOUR"] == "image"
    start = time.monotonic()
    again = image_store.export(image_store.build(TaskImage(context=image_context)), "again")
    assert again.id == image_root.id and again.root == image_root.root
    assert time.monotonic() - start < 10  # no buildah bud ran: the tag was found by content hash


def test_a_changed_context_is_a_new_image(image_store, image_context, tmp_path):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    for name in ("Dockerfile", "tool.sh"):
        (ctx / name).write_text((image_context / name).read_text())
    (ctx / "tool.sh").write_text("#!/bin/sh\necho changed\n")
    assert image_store.build(TaskImage(context=ctx)) != image_store.build(TaskImage(context=image_context))


def test_workdir_and_env_of_the_image_are_applied_and_its_python_is_its_own(image_root):
    with get_backend("bwrap").create(SandboxSpec(image=image_root, env={"EXTRA": "1"})) as box:
        res = box.run('pwd; cat seed.txt; echo "$TASK_FLAVOUR $EXTRA $HOME"; echo "$PATH"; imgtool; '
                      'python3 -c "import sys; print(sys.prefix, sys.path)"; env | grep -c "^PYTHON" || true; '
                      'test -e /opt/proctor && echo HOST-OPT; ls /usr/lib/python3/dist-packages | grep -c proctor || true')
        lines = res.text.splitlines()
        assert lines[0] == "/app" and lines[1] == "seeded"
        assert lines[2] == "image 1 /workdir"
        assert lines[3] == "/opt/imgbin:/usr/local/bin:/usr/bin:/bin"
        assert lines[4] == "tool-from-image"
        assert lines[5].startswith("/usr ") and "/work" not in lines[5] and "proctor" not in lines[5]
        assert lines[6] == "0" and "HOST-OPT" not in res.text and lines[-1] == "0"
        # The harness's package is not importable, and the student still writes only its workdir.
        res = box.run("python3 -c 'import proctor' 2>&1; touch /app/x /usr/x 2>&1; echo hi > /workdir/ok && cat /workdir/ok")
        assert "No module named 'proctor'" in res.text and "Read-only" in res.text and res.text.strip().endswith("hi")


def test_the_host_root_and_system_stay_invisible_in_an_image(image_root):
    marker = Path("/root") / f"proctor-image-marker-{os.getpid()}"
    marker.write_text("host secret")
    try:
        with get_backend("bwrap").create(SandboxSpec(image=image_root)) as box:
            res = box.run(f"test -e {marker} && echo LEAK; cat /etc/debian_version; grep -c student /etc/passwd; "
                          "test -e /usr/bin/bwrap && echo HOST-USR; test -e /etc/shadow && echo SHADOW; true")
            assert "LEAK" not in res.text and "HOST-USR" not in res.text
            assert res.text.splitlines()[1] == "1"  # the generated passwd over the image's /etc
    finally:
        marker.unlink()


def test_a_missing_image_gives_an_error_naming_it(image_store, tmp_path):
    with pytest.raises(ImageError, match="proctor-no-such-image:1"):
        prepare(TaskImage(ref="proctor-no-such-image:1"), image_store)
    (tmp_path / "Dockerfile").write_text("FROM proctor-missing-base:7\nRUN true\n")
    with pytest.raises(ImageError, match="proctor-missing-base:7"):
        prepare(TaskImage(context=tmp_path), image_store)


def test_a_bad_dockerfile_gives_a_clear_error(image_store, tmp_path):
    from conftest import BASE_IMAGE

    (tmp_path / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN exit 3\n")
    with pytest.raises(ImageError, match="cannot build the image of .*Dockerfile"):
        prepare(TaskImage(context=tmp_path), image_store)
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nBOGUS instruction\n")
    with pytest.raises(ImageError, match="cannot build the image of .*Dockerfile"):
        prepare(TaskImage(context=tmp_path), image_store)
    with pytest.raises(ImageError, match="does not exist"):
        prepare(TaskImage(context=tmp_path / "nope"), image_store)


def test_an_image_reference_runs_from_the_local_store(image_store):
    from conftest import BASE_IMAGE

    root = prepare(TaskImage(ref=BASE_IMAGE), image_store)
    with get_backend("bwrap").create(SandboxSpec(image=root)) as box:
        res = box.run("pwd; id -u")
        assert res.text.split() == ["/workdir", str(box.uid)]


class TestProtectionsOverAnImage:
    """What the isolation tests do not cover, over the image root: limits, kill-all, the filter."""

    pytestmark = pytest.mark.runtimes("image")

    def test_the_syscall_filter_refuses_and_records_inside_the_image(self, make_sandbox):
        from proctor.sandbox.confinement import _ADD_KEY

        box = make_sandbox()
        res = box.run(["/usr/bin/python3", "-c", _ADD_KEY])
        assert res.text.strip().startswith("refused-"), res.text
        assert [a.syscall for a in box.syscall_attempts()] == ["add_key"]

    def test_kill_all_leaves_no_student_process_and_the_workdir_survives(self, make_sandbox, host_processes_of):
        box = make_sandbox()
        box.run("(setsid sleep 1000 &) ; nohup sleep 1000 >/dev/null 2>&1 & echo kept > /workdir/f")
        assert host_processes_of(box.uid)
        report = box.kill_all()
        assert report.empty and not host_processes_of(box.uid)
        assert box.run("cat /workdir/f").text.strip() == "kept"

    def test_the_memory_and_process_limits_hold_in_the_image(self, make_sandbox):
        box = make_sandbox(memory_bytes=64 * 1024 * 1024, pids=32)
        res = box.run(["/usr/bin/python3", "-c", "b = bytearray(256 * 1024 * 1024); print('allocated')"], timeout=30)
        assert "allocated" not in res.text and (res.exit_code != 0 or res.signal)
        res = box.run("for i in $(seq 64); do sleep 5 & done 2>&1 | grep -c -i 'resource\\|fork' ; true", timeout=30)
        assert int(res.text.split()[-1]) > 0
        box.kill_all()

    def test_custody_copies_out_of_the_image_sandbox_and_refuses_a_link_into_it(self, make_sandbox, tmp_path):
        from proctor.custody import take_custody

        box = make_sandbox()
        box.run("echo answer > /workdir/out.txt; ln -s /etc/passwd /workdir/link.txt")
        report = take_custody(box.workdir, ["out.txt", "link.txt"], tmp_path / "c", student_uid=box.uid)
        assert (tmp_path / "c" / "out.txt").read_text() == "answer\n"
        assert not (tmp_path / "c" / "link.txt").exists()
        assert report.model_dump_json().count("link.txt") >= 1


ENV_INIT = '''
from pathlib import Path
from proctor import FunctionJudge, Step, Task
from proctor.agents.script import Script, ScriptTurn
from proctor.images import TaskImage

CTX = Path({ctx!r})


def _judge(ctx):
    path = ctx.submission / "answer.txt"
    return 1.0 if path.is_file() and path.read_text().strip() == "tool-from-image image" else 0.0


TASKS = [Task(
    id="in-image",
    image=TaskImage(context=CTX),
    steps=(Step(instructions="Run imgtool and write its output and $TASK_FLAVOUR to /workdir/answer.txt.",
                submit=("answer.txt",), judge=FunctionJudge(fn=_judge, timeout_s=5)),),
    oracle=Script(name="o", turns=[
        ScriptTurn(tool="bash", arguments={{"command": 'echo "$(imgtool) $TASK_FLAVOUR" > /workdir/answer.txt; pwd'}}),
        ScriptTurn(tool="submit", arguments={{}}),
    ]),
)]
'''


def test_a_task_with_an_image_runs_end_to_end_and_check_confinement_reports_images(
        confinement, image_store, image_context, tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from proctor.cli import app

    monkeypatch.setenv("PROCTOR_IMAGE_STORE", str(image_store.root))
    monkeypatch.setenv("PROCTOR_IMAGE_ROOTS", str(image_store.roots))
    env = tmp_path / "imgenv"
    env.mkdir()
    (env / "__init__.py").write_text(ENV_INIT.format(ctx=str(image_context)))
    got = CliRunner().invoke(app, ["run", str(env), "--task", "in-image", "--agent", "oracle", "--out", str(tmp_path / "out"), "--json"],
                             catch_exceptions=False)
    assert got.exit_code == 0, got.output
    [result] = [json.loads(p.read_text()) for p in (tmp_path / "out").glob("*/result.json")]
    assert (result["status"], result["score"]) == ("completed", 1.0), result
    got = CliRunner().invoke(app, ["check", "confinement", "--json"], catch_exceptions=False)
    report = json.loads(got.stdout)
    assert report["images"]["supported"] is True and "buildah" in report["images"]["detail"]


def test_a_vanished_image_root_and_the_gvisor_runtime_are_refused_clearly(image_root, gvisor_confinement):
    from proctor.errors import ConfigError, SandboxError

    gone = image_root.model_copy(update={"root": "/nonexistent/proctor-image.erofs"})
    with pytest.raises(SandboxError, match="task image's root .* is gone"):
        get_backend("bwrap").create(SandboxSpec(image=gone))
    with pytest.raises(ConfigError, match="bwrap runtime only"):
        get_backend("gvisor").create(SandboxSpec(image=image_root))


# -- the workdir starts with the image's files there (a Dockerfile's COPY into /app) --------------------
def test_the_workdir_over_the_images_own_directory_starts_with_its_files_owned_by_the_student(image_root):
    spec = SandboxSpec(image=image_root, workdir="/app", seed_workdir=True)
    with get_backend("bwrap").create(spec) as box:
        res = box.run("cat /app/seed.txt; stat -c %u /app/seed.txt; echo more >> /app/seed.txt && rm /app/seed.txt && echo rm-ok")
        assert res.text.split() == ["seeded", str(box.uid), "rm-ok"], res.text
    # Without seeding (what a grading sandbox gets) the writable workdir hides the image's files.
    with get_backend("bwrap").create(spec.model_copy(update={"seed_workdir": False})) as box:
        assert box.run("ls -A /app | wc -l").text.strip() == "0"


def test_a_grading_sandbox_gets_the_custody_copy_and_never_the_images_files_again(image_root, tmp_path):
    from proctor.judges.base import JudgeContext

    student_spec = SandboxSpec(image=image_root, workdir="/app", seed_workdir=True)
    spec = JudgeContext(submission=tmp_path, sandbox_spec=student_spec).grading_spec()
    assert (spec.image, spec.workdir, spec.seed_workdir) == (image_root, "/app", False)
    (tmp_path / "answer.txt").write_text("42\n")  # the student deleted seed.txt: it stays deleted
    with get_backend("bwrap").create(spec) as box:
        box.copy_in(tmp_path, read_only=True)
        assert box.run("ls -A /app").text.split() == ["answer.txt"]


def test_a_link_in_the_images_workdir_is_refused_naming_the_image(image_store, tmp_path):
    from conftest import BASE_IMAGE

    from proctor.errors import ConfigError

    (tmp_path / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN mkdir -p /app && ln -s /etc/passwd /app/pw\nWORKDIR /app\n")
    root = prepare(TaskImage(context=tmp_path), image_store)
    with pytest.raises(ConfigError, match=r"task image .*: /app/pw: only regular files and directories"):
        get_backend("bwrap").create(SandboxSpec(image=root, workdir="/app", seed_workdir=True))


def test_a_workdir_under_an_image_directory_that_lacks_it_is_a_clear_error(image_root):
    from proctor.errors import ConfigError

    # /app exists in the test image (read-only); /app/sub does not, and cannot be made there.
    with pytest.raises(ConfigError, match=r"has no directory /app/sub for the task's workdir /app/sub; make it in the Dockerfile"):
        get_backend("bwrap").create(SandboxSpec(image=image_root, workdir="/app/sub"))
    with get_backend("bwrap").create(SandboxSpec(image=image_root, workdir="/newtop")) as box:  # a top-level path is made
        assert box.run("pwd").text.strip() in ("/app", "/newtop")

"""No shared inodes, no shared counters: what one student does to the files it can read, or to
the host's counters, is invisible to every other sandbox (a judge's included), and honest tools
still work. Each attack runs as the student in a real sandbox against the real kernel."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from proctor.sandbox import SandboxSpec
from proctor.sandbox import procmask
from proctor.sandbox.models import Mount

HOLD_LOCK = textwrap.dedent("""
    import fcntl, sys
    f = open(sys.argv[1], "rb")
    fcntl.flock(f, fcntl.LOCK_EX)
    print("held", flush=True)
    sys.stdin.read()
""")
TRY_LOCK = textwrap.dedent("""
    import fcntl, sys
    f = open(sys.argv[1], "rb")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("free")
    except BlockingIOError:
        print("locked")
""")
# Watch a file; every line on stdin asks how many events arrived since the last one.
WATCH = textwrap.dedent("""
    import ctypes, os, select, sys
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    assert libc.inotify_add_watch(fd, sys.argv[1].encode(), 0x00000FFF) >= 0, ctypes.get_errno()
    print("ready", flush=True)
    for _ in sys.stdin:
        n = 0
        while select.select([fd], [], [], 0.3)[0]:
            n += len(os.read(fd, 65536)) // 16
        print(n, flush=True)
""")
# The same with an unprivileged fanotify inode mark (refused once the syscall filter is in place).
FANOTIFY = textwrap.dedent("""
    import ctypes, os, select, sys
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.fanotify_init(0x200, os.O_RDONLY)  # FAN_CLASS_NOTIF | FAN_REPORT_FID
    if fd < 0:
        print("refused", flush=True)
        sys.exit()
    libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
    assert libc.fanotify_mark(fd, 1, 0x21, -100, sys.argv[1].encode()) == 0, ctypes.get_errno()  # ADD; ACCESS|OPEN
    print("ready", flush=True)
    for _ in sys.stdin:
        n = 0
        while select.select([fd], [], [], 0.3)[0]:
            n += len(os.read(fd, 65536)) > 0
        print(n, flush=True)
""")
STATVFS = textwrap.dedent("""
    import os, sys
    for p in sys.argv[1:]:
        s = os.statvfs(p)
        print(p, s.f_blocks, s.f_bfree, s.f_files, s.f_ffree)
""")


def _data_spec(tmp_path) -> SandboxSpec:
    data = tmp_path / "da,ta:dir"  # overlayfs option separators in the name: escaped, not split
    data.mkdir()
    (data / "input.txt").write_text("task data\n")
    return SandboxSpec(data_dir=str(data))


def _shared_paths(box) -> list[str]:
    return ["/usr/lib/os-release", "/etc/ld.so.cache", "/etc/passwd", "/dev/null", f"{box.python_runtime}/bin/python3", "/data/input.txt"]


def _ok(res):
    assert res.exit_code == 0, (res.argv, res.stderr)
    return res


def _readline(proc) -> str:
    return proc.popen.stdout.readline().decode().strip()


@pytest.mark.parametrize("index", range(6))
def test_a_lock_on_a_shared_read_only_file_is_not_seen_by_another_live_sandbox(make_sandbox, tmp_path, index):
    spec = _data_spec(tmp_path)
    sender, receiver = make_sandbox(spec), make_sandbox(spec)
    path = _shared_paths(sender)[index]
    holder = sender.spawn(["python3", "-c", HOLD_LOCK, path])
    try:
        assert _readline(holder) == "held"
        # Control: the lock is real, a second opener in the same sandbox sees it.
        assert sender.run(["python3", "-c", TRY_LOCK, path]).text.strip() == "locked"
        assert receiver.run(["python3", "-c", TRY_LOCK, path]).text.strip() == "free"
    finally:
        holder.kill_tree()


@pytest.mark.parametrize("script", [WATCH, FANOTIFY], ids=["inotify", "fanotify"])
def test_a_watch_on_a_system_file_sees_nothing_of_another_sandbox(make_sandbox, tmp_path, script):
    spec = _data_spec(tmp_path)
    watcher_box, other = make_sandbox(spec), make_sandbox(spec)
    for path in ("/usr/lib/os-release", "/etc/ld.so.cache", "/dev/null", "/data/input.txt"):
        watcher = watcher_box.spawn(["python3", "-c", script, path])
        try:
            first = _readline(watcher)
            if first == "refused":  # fanotify_init refused by the syscall filter: no mark at all
                continue
            assert first == "ready"
            _ok(other.run(["/bin/sh", "-c", f"cat {path} > /dev/null; echo x >> /dev/null"]))
            watcher.popen.stdin.write(b"?\n")
            watcher.popen.stdin.flush()
            assert _readline(watcher) == "0", path
            # Control: the watch works; its own sandbox's access is seen.
            _ok(watcher_box.run(["/bin/sh", "-c", f"cat {path} > /dev/null"]))
            watcher.popen.stdin.write(b"?\n")
            watcher.popen.stdin.flush()
            assert int(_readline(watcher)) > 0, path
        finally:
            watcher.kill_tree()


def test_no_reachable_path_shows_the_host_filesystems_counters(make_sandbox, tmp_path):
    spec = _data_spec(tmp_path)
    box = make_sandbox(spec)
    paths = ["/", "/usr", "/usr/bin/env", "/etc", "/etc/passwd", "/proc/meminfo", "/proc/sys/kernel/pty/nr",
             "/dev", "/dev/null", "/dev/shm", "/tmp", "/workdir", "/data", "/data/input.txt", box.python_runtime]
    before = _ok(box.run(["python3", "-c", STATVFS, *paths])).text
    host_fs = {(s.f_blocks, s.f_files) for s in (os.statvfs(p) for p in ("/", "/usr", str(box.workdir.parent), str(tmp_path), box.python_runtime))}
    # Move the host filesystems' free inodes and blocks, as custody copying files would.
    scratch = [tmp_path / "scratch", box.workdir.parent.parent / f"{box.id}-scratch"]
    try:
        for d in scratch:
            d.mkdir()
            for i in range(200):
                (d / str(i)).write_bytes(b"x" * 8192)
            os.sync()
        after = _ok(box.run(["python3", "-c", STATVFS, *paths])).text
    finally:
        for d in scratch:
            for f in d.glob("*"):
                f.unlink()
            d.rmdir()
    assert before == after
    for line in after.splitlines():
        _, blocks, _, files, _ = line.split()
        assert (int(blocks), int(files)) not in host_fs, line


def test_the_pty_counter_is_not_shared(sandbox):
    read = lambda: _ok(sandbox.run(["cat", "/proc/sys/kernel/pty/nr"])).text  # noqa: E731
    before = read()
    fds = [fd for _ in range(3) for fd in pty.openpty()]
    try:
        assert read() == before == "0\n"
    finally:
        for fd in fds:
            os.close(fd)


def test_another_students_keys_are_not_listed(make_sandbox):
    sender, receiver = make_sandbox(), make_sandbox()
    # add_key(2) as the sender (refused once a syscall filter is in place: then nothing to list).
    sender.run(["python3", "-c", "import ctypes; ctypes.CDLL(None).syscall(248, b'user', b'tok', b'1', 1, -2)"])
    assert _ok(receiver.run(["cat", "/proc/key-users", "/proc/keys"])).text == ""


def test_every_host_global_proc_file_shows_the_sandboxs_own_content(sandbox):
    made = procmask.contents(sandbox.spec.limits)
    assert "sys/kernel/pty/nr" in made and "sys/fs/file-nr" in made and "loadavg" in made
    script = "import sys\nfor n in sys.argv[1:]:\n    sys.stdout.write(repr(open('/proc/' + n).read()) + '\\n')"
    seen = _ok(sandbox.run(["python3", "-c", script, *made])).text.splitlines()
    assert seen == [repr(made[n]) for n in made]
    listing = _ok(sandbox.run(["/bin/sh", "-c", "for d in " + " ".join(f"/proc/{d}" for d in procmask.masked_dirs()) + "; do ls -A $d; done"]))
    assert listing.text == ""


def test_every_readable_proc_file_is_accounted_for(sandbox):
    """A counter a new kernel adds must be classified (masked, per-namespace, static or residual)
    before sandboxes run on it: docs/sandbox.md says why each class may be read."""
    script = (
        "cd /proc && find . -path './[0-9]*' -prune -o -path ./self -prune -o -path ./thread-self -prune "
        "-o -path ./net -prune -o -path ./sys/net -prune -o -type f -readable -print 2>/dev/null"
    )
    found = [p[2:] for p in sandbox.run(["/bin/sh", "-c", script], timeout=120).text.split()]
    assert "uptime" in found and "sys/kernel/pty/nr" in found
    assert [p for p in found if procmask.classify(p) is None] == []


def test_honest_tools_still_work(sandbox):
    script = textwrap.dedent("""
        set -e
        free -m | grep -q '^Mem: *2048 '
        ps aux | grep -q 'ps aux'
        top -bn1 >/dev/null
        df -h / /usr /workdir >/dev/null
        test "$(nproc)" -ge 1
        python3 -c 'import os, multiprocessing; assert os.cpu_count() >= 1 and multiprocessing.cpu_count() >= 1
        import numpy; assert numpy.arange(4).sum() == 6
        with multiprocessing.Pool(2) as p: assert p.map(abs, [-1, -2]) == [1, 2]'
        python3 -m pip --version >/dev/null
        python3 -m pip list 2>/dev/null | grep -qi numpy
        cd /workdir && git init -q repo && cd repo && echo hi > a.txt && git add a.txt
        git -c user.name=s -c user.email=s@x commit -qm one && git log --oneline | grep -q one
        echo done
    """)
    res = sandbox.run(["/bin/bash", "-c", script], timeout=120)
    assert res.exit_code == 0 and res.text.strip().endswith("done"), res.stderr


def _wheel(directory) -> str:
    """A minimal pure-Python wheel, as a package index would serve it."""
    name = "hello-1.0-py3-none-any.whl"
    files = {
        "hello/__init__.py": "X = 1\n",
        "hello-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: hello\nVersion: 1.0\n",
        "hello-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(directory / name, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr("hello-1.0.dist-info/RECORD", "".join(f"{p},,\n" for p in [*files, "hello-1.0.dist-info/RECORD"]))
    return name


def test_pip_installs_a_package_and_a_failed_install_fails_cleanly(sandbox, tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    name = _wheel(wheels)
    sandbox.copy_in(wheels, "wheels")
    script = f"python3 -m pip install -q --no-index --target /workdir/site /workdir/wheels/{name} && cd / && PYTHONPATH=/workdir/site python3 -c 'import hello; print(hello.X)'"
    res = sandbox.run(["/bin/sh", "-c", script], timeout=180)
    assert res.exit_code == 0 and res.text.strip() == "1", (res.text, res.stderr)
    res = sandbox.run(["python3", "-m", "pip", "install", "--no-index", "surely-not-a-package"], timeout=120)
    assert res.exit_code not in (0, None) and b"Traceback" not in res.stderr


def test_a_test_runner_watching_its_own_files_sees_them_change(sandbox):
    watcher = sandbox.spawn(["python3", "-c", WATCH, "/workdir"])
    try:
        assert _readline(watcher) == "ready"
        _ok(sandbox.run(["/bin/sh", "-c", "echo x > /workdir/test_me.py"]))
        watcher.popen.stdin.write(b"?\n")
        watcher.popen.stdin.flush()
        assert int(_readline(watcher)) > 0
    finally:
        watcher.kill_tree()


@pytest.mark.parametrize("copied", [True, False], ids=["small-copied", "large-overlaid"])
def test_a_read_only_task_mount_gets_its_own_inodes(make_sandbox, tmp_path, monkeypatch, copied):
    from proctor.sandbox import ownfs

    if not copied:
        monkeypatch.setattr(ownfs, "COPY_BYTES", 0)  # stands for data too large to copy
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "f").write_text("r")
    box = make_sandbox(SandboxSpec(mounts=(Mount(source=str(ro), target="/ro"), Mount(source=str(ro / "f"), target="/rof"))))
    assert _ok(box.run(["cat", "/ro/f", "/rof"])).text == "rr"
    assert box.run(["/bin/sh", "-c", "touch /ro/x"]).exit_code != 0
    assert _ok(box.run(["stat", "-f", "-c", "%T", "/ro"])).text.strip() == ("tmpfs" if copied else "overlayfs")
    host_file = f"{os.stat(ro / 'f').st_dev} {os.stat(ro / 'f').st_ino}"
    assert (_ok(box.run(["stat", "-c", "%d %i", "/rof"])).text.strip() == host_file) is not copied


def test_the_confinement_report_says_what_is_closed_and_what_stays(confinement):
    assert confinement.get("own_inodes").status == "enforced"
    assert confinement.get("host_counters_masked").status == "enforced"
    residual = confinement.get("shared_host_resources")
    assert residual.status == "degraded" and "page cache" in residual.detail and "bit/s" in residual.detail


def test_the_covert_channel_benchmark_runs_and_reports_both_channels(confinement):
    bench = Path(__file__).resolve().parents[1] / "bench" / "covert.py"
    proc = subprocess.run([sys.executable, str(bench), "--bits", "32", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert res["cpu_contention"]["bits"] == 32 and "loop_bits_per_s" in res["cpu_contention"]
    assert "bits" in res["page_cache"] and res["tcp_socket_count"]["symbols"] == 32
    assert res["futex"]["bits"] == res["pagemap"]["bits"] == 32

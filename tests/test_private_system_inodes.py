"""Each sandbox reads its system files from its own mount of the system image (sysimage.py):
the channels that ran through the host's inodes of /usr carry nothing, between two live sandboxes
and from one rollout to the next. Every attack runs as the student in real sandboxes; with the
image removed (the sandboxes then read /usr through overlays of the host's files) each of them
decodes its message, which is what these tests would then catch."""

from __future__ import annotations

import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proctor.sandbox import SandboxSpec, reclaim_stale, sysimage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import covert  # noqa: E402

# A file that ships with every Debian (base-files) and that nothing on the host maps or reads.
SHARED = "/usr/share/common-licenses/GPL-3"
FUTEX_NR = {"x86_64": 202, "aarch64": 98}[platform.machine()]

# The receiver waits on a shared futex at offset 0 of the file's mapping; the sender wakes every
# waiter on the same word of its own mapping. The kernel keys such a futex on the file's inode and
# offset: with the host's inodes both land on one key.
RECEIVE_FUTEX = f"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
fd = os.open(sys.argv[2], os.O_RDONLY)
addr = libc.mmap(None, 4096, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
val = ctypes.c_uint32.from_address(addr).value
class timespec(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
print("ready", flush=True)
woken = 0
for _ in range(int(sys.argv[1])):
    r = libc.syscall({FUTEX_NR}, ctypes.c_void_p(addr), 0, val, ctypes.byref(timespec(0, 200_000_000)), None, 0)
    woken += r == 0
print("woken", woken, flush=True)
"""
SEND_FUTEX = f"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
fd = os.open(sys.argv[1], os.O_RDONLY)
addr = libc.mmap(None, 4096, 1, 1, fd, 0)
woke, end = 0, time.time() + 2.0
while time.time() < end:
    woke += max(0, libc.syscall({FUTEX_NR}, ctypes.c_void_p(addr), 1, 2**31 - 1, None, None, 0))
    time.sleep(0.01)
print(woke)
"""

# Bit 56 of a /proc/self/pagemap entry: the page is mapped by this process only. The receiver
# maps a page of the file and watches the bit while the sender maps (1) or does not map (0) it.
PAGEMAP_BIT = f"""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
fd = os.open({SHARED!r}, os.O_RDONLY)
addr = libc.mmap(None, 4096, 1, 1, fd, 0)
ctypes.c_char.from_address(addr).value  # fault the page in
pm = os.open("/proc/self/pagemap", os.O_RDONLY)
for line in sys.stdin:
    entry = struct.unpack("<Q", os.pread(pm, 8, addr // 4096 * 8))[0]
    print((entry >> 56) & 1, flush=True)
"""
HOLD_MAPPING = f"""
import mmap, os, sys
fd = os.open({SHARED!r}, os.O_RDONLY)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ)
m[0]
print("mapped", flush=True)
sys.stdin.read()
"""


def _image_loops() -> int:
    """Loop devices whose backing file is a system image."""
    count = 0
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            count += backing.read_text().startswith(str(sysimage.IMAGE_DIR) + "/")
        except OSError:
            pass
    return count


def _futex_woken(sender_box, receiver_box, path: str = SHARED) -> tuple[int, int]:
    receiver = receiver_box.spawn(["python3", "-c", RECEIVE_FUTEX, "12", path])
    assert receiver.popen.stdout.readline() == b"ready\n"
    time.sleep(0.2)
    woke = int(sender_box.run(["python3", "-c", SEND_FUTEX, path], timeout=30).stdout.strip() or -1)
    out = receiver.popen.stdout.read().decode()
    receiver.popen.wait(timeout=30)
    return woke, int(out.split()[-1])


def test_the_system_image_is_required_and_enforced(confinement):
    assert "private_system_inodes" in sysimage_required()
    assert confinement.get("private_system_inodes").status == "enforced"


def sysimage_required() -> tuple[str, ...]:
    from proctor.sandbox import DEFAULT_REQUIRED

    return DEFAULT_REQUIRED


@pytest.mark.parametrize("where", ["system", "runtime", "etc", "data"])
def test_a_futex_on_a_shared_file_mapping_wakes_nobody_in_another_sandbox(make_sandbox, tmp_path, where):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "shared").write_bytes(os.urandom(8192))
    os.chmod(data / "shared", 0o644)
    a, b = make_sandbox(SandboxSpec(data_dir=str(data))), make_sandbox(SandboxSpec(data_dir=str(data)))
    path = {"system": SHARED, "runtime": f"{a.python_runtime}/pyvenv.cfg", "etc": "/etc/ld.so.cache", "data": "/data/shared"}[where]
    # The attack works where the mapping is one inode (two processes of one sandbox)...
    woke, woken = _futex_woken(a, a, path)
    assert woke > 0 and woken > 0
    # ...and carries nothing between two live sandboxes.
    woke, woken = _futex_woken(a, b, path)
    assert (woke, woken) == (0, 0)


def test_the_pagemap_exclusive_bit_does_not_see_another_sandboxs_mapping(make_sandbox):
    a, b = make_sandbox(), make_sandbox()

    def bits(holder_box) -> list[int]:
        receiver = b.spawn(["python3", "-c", PAGEMAP_BIT])
        msg = [random.getrandbits(1) for _ in range(32)]
        got = []
        holder = None
        for bit in msg:
            if bit and holder is None:
                holder = holder_box.spawn(["python3", "-c", HOLD_MAPPING])
                assert holder.popen.stdout.readline() == b"mapped\n"
            elif not bit and holder is not None:
                holder.kill_tree()
                holder = None
            receiver.popen.stdin.write(b"?\n")
            receiver.popen.stdin.flush()
            got.append(1 - int(receiver.popen.stdout.readline()))  # not exclusive = someone else maps it
        if holder is not None:
            holder.kill_tree()
        receiver.kill_tree()
        return [m ^ g for m, g in zip(msg, got)], msg

    errors, msg = bits(b)  # the attack works within one sandbox...
    assert sum(errors) == 0
    errors, msg = bits(a)  # ...and sees nothing of another: the bit never moves
    assert sum(errors) == sum(msg)


def test_page_cache_residency_carries_nothing_to_a_later_rollout(make_sandbox):
    from proctor.sandbox import Sandbox

    files = covert.cold_files(limit=40)
    slots = [f"{p}@{off}" for p in files for off in range(0, os.path.getsize(p) - 4096, covert.SPACING)][:64]
    assert len(slots) >= 32
    covert.evict(files)  # cold on the host, as files nobody has read are
    msg = [random.getrandbits(1) for _ in slots]
    sender = Sandbox.create()
    try:
        res = sender.run(["python3", "-c", covert.SEND_PAGES], input=" ".join(s for s, bit in zip(slots, msg) if bit).encode(), timeout=120)
        assert res.exit_code == 0, res.stderr
    finally:
        sender.close()
    receiver = make_sandbox()
    res = receiver.run(["python3", "-c", covert.PROBE_PAGES], input=" ".join(slots).encode(), timeout=120)
    covert.evict(files)
    ns = [int(x) for x in res.text.split("\n")[1].split()]
    got = covert.decide(ns, high_is_one=False)
    errors = sum(a != b for a, b in zip(msg, got))
    # Nothing to decode: the receiver's guesses are as good as coin flips.
    assert len(slots) * 0.25 <= errors <= len(slots) * 0.75, (errors, len(slots))


def test_host_atimes_are_not_visible_and_a_read_in_one_sandbox_moves_nothing_in_another(make_sandbox):
    path = "/usr/share/common-licenses/Apache-2.0"
    st = os.stat(path)
    # An access time older than a day: relatime would move it on the next read.
    os.utime(path, ns=(st.st_mtime_ns - 3 * 86400 * 10**9, st.st_mtime_ns))
    try:
        a, b = make_sandbox(), make_sandbox()
        stat_atime = ["stat", "-c", "%X", path]
        before = b.run(stat_atime).text.strip()
        assert before == str(st.st_mtime_ns // 10**9)  # the image's mtime, never the host's atime
        assert a.run(["cat", path]).exit_code == 0
        assert b.run(stat_atime).text.strip() == before
        a.close()
        later = make_sandbox()
        assert later.run(["cat", path]).exit_code == 0
        assert later.run(stat_atime).text.strip() == before
    finally:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_the_page_cache_of_the_image_is_charged_to_the_sandbox(sandbox, sandbox_cgroup_file):
    v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
    usage = lambda: int(sandbox_cgroup_file(sandbox, "memory", "memory.current" if v2 else "memory.usage_in_bytes"))  # noqa: E731
    big = max((p for p in covert.cold_files(min_bytes=16 << 20, limit=20)), key=os.path.getsize)
    before = usage()
    assert sandbox.run(["cat", big], output_cap=16).exit_code == 0
    grown = usage() - before
    assert grown >= min(os.path.getsize(big), 16 << 20) * 0.8, (big, grown)


def test_loop_devices_are_released_at_close_and_after_a_crash(confinement, tmp_path):
    from proctor.sandbox import Sandbox

    base = _image_loops()
    with Sandbox.create() as box:
        assert box.run(["true"]).exit_code == 0
        assert _image_loops() == base + 1
    assert _image_loops() == base
    # A harness killed with a live sandbox: reclaim unmounts its image and the loop device goes.
    script = (
        "import os, signal; from proctor.sandbox import Sandbox; box = Sandbox.create(); "
        "box.run(['true']); print(box.id, flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode == -9 and res.stdout.startswith("sbx-"), res.stderr
    assert _image_loops() == base + 1
    assert res.stdout.strip() in reclaim_stale()
    deadline = time.monotonic() + 5
    while _image_loops() != base and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _image_loops() == base


def test_a_stale_image_is_a_clear_error_naming_the_rebuild(confinement, tmp_path):
    (tmp_path / "system-0000.erofs").write_bytes(b"")
    env = {**os.environ, "PROCTOR_IMAGE_DIR": str(tmp_path)}
    proctor = Path(sys.executable).with_name("proctor")
    res = subprocess.run([str(proctor), "image", "status"], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 1
    assert res.stderr.startswith("error: the system image") and "stale" in res.stderr and "proctor image build" in res.stderr
    script = "from proctor.sandbox import Sandbox\ntry:\n Sandbox.create()\nexcept Exception as e:\n print(type(e).__name__, e)"
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert res.stdout.startswith("ConfinementError") and "private_system_inodes" in res.stdout and "stale" in res.stdout, res.stdout + res.stderr


HONEST = r"""
set -e
python3 -c 'import numpy, json, sqlite3, ssl; print("numpy", numpy.arange(3).sum())'
python3 - <<'EOF'
import multiprocessing as mp
def work(lock, counter):
    for _ in range(100):
        with lock:
            counter.value += 1
if __name__ == "__main__":
    lock, counter = mp.Lock(), mp.Value("i", 0)
    ps = [mp.Process(target=work, args=(lock, counter)) for _ in range(3)]
    [p.start() for p in ps]; [p.join() for p in ps]
    print("counter", counter.value)
EOF
ldd /usr/bin/python3 | grep -q libc.so && echo ldd-ok
git init -q repo && cd repo && echo hi > f && git add f && git -c user.name=s -c user.email=s@x commit -qm one && git log --oneline | wc -l && cd ..
if command -v gcc >/dev/null; then printf '#include <stdio.h>\nint main(){puts("compiled");}' > c.c && gcc c.c -o c && ./c; else echo compiled; fi
if pip install --no-index nonexistent-package-xyz >/dev/null 2>&1; then echo pip-succeeded; else echo pip-failed-cleanly; fi
ls /usr/share/doc 2>/dev/null | wc -l
"""


def test_honest_work_runs_from_the_image(sandbox):
    res = sandbox.run(["bash", "-c", HONEST], timeout=120)
    assert res.exit_code == 0, res.stderr
    lines = res.text.split()
    for expected in ("numpy", "counter", "300", "ldd-ok", "compiled", "pip-failed-cleanly"):
        assert expected in lines, res.text

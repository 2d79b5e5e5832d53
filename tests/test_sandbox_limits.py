"""Limits the kernel enforces: memory in every form, processes, CPU, disk bytes and inodes."""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time

from proctor.sandbox.models import MiB
from conftest import BOTH_RUNTIMES, student_processes  # noqa: E402

pytestmark = BOTH_RUNTIMES

PY = "/usr/bin/python3"


def harness_can_start_processes() -> bool:
    return subprocess.run(["/bin/true"], timeout=10).returncode == 0


def test_an_anonymous_memory_hog_is_killed_at_its_limit_and_the_harness_is_unaffected(make_sandbox):
    box = make_sandbox(memory_bytes=128 * MiB)
    res = box.run([PY, "-c", "x = bytearray(512 * 1024**2); print('allocated')"], timeout=30)
    assert "allocated" not in res.text
    assert res.signal == 9
    assert box.usage().oom_kills >= 1
    assert harness_can_start_processes()


def test_usage_says_what_the_sandbox_holds_now_and_how_much_of_it_is_reclaimable_file_cache(make_sandbox, runtime):
    box = make_sandbox(memory_bytes=512 * MiB)
    box.run("true")
    idle = box.usage()
    assert 0 <= idle.memory_file_cache_bytes <= idle.memory_bytes
    holder = box.spawn([PY, "-c", "import time; x = bytearray(96 * 1024**2); x[::4096] = b'1' * len(x[::4096]); "
                        "print('held', flush=True); time.sleep(1000)"])
    assert holder.popen.stdout.readline() == b"held\n"
    held = box.usage()
    assert held.memory_bytes - idle.memory_bytes >= 90 * MiB, (idle, held)
    # Anonymous memory and tmpfs files are held, not reclaimable cache (under gVisor the sentry's
    # memory is a shared-memory file on the host: not counted as cache either).
    box.run("dd if=/dev/zero of=/tmp/fill bs=1M count=32 2>/dev/null")
    filled = box.usage()
    assert filled.memory_bytes - held.memory_bytes >= 30 * MiB, (held, filled)
    assert filled.memory_file_cache_bytes - idle.memory_file_cache_bytes < 16 * MiB, (idle, filled)
    holder.kill_tree()
    box.run("rm /tmp/fill")
    assert box.usage().memory_bytes < filled.memory_bytes - 100 * MiB
    if runtime == "bwrap":  # files read from the sandbox's own system image are its page cache
        box.run("cat $(find /usr/lib -type f -size +1M | head -n 40) > /dev/null")
        assert box.usage().memory_file_cache_bytes - idle.memory_file_cache_bytes >= 16 * MiB


def test_a_tmpfs_hog_in_the_workdir_counts_against_memory(make_sandbox):
    # The workdir quota alone would allow 512 MiB; the memory limit must stop it first.
    box = make_sandbox(memory_bytes=96 * MiB, workdir_bytes=512 * MiB)
    box.run("dd if=/dev/zero of=/workdir/fill bs=1M count=400 2>&1", timeout=60)
    # Measured from the host: under gVisor the limit kills the whole container, shell included,
    # and under bwrap nothing new starts once the fill holds the memory (the code pages of the
    # sandbox's own system image are charged to it too: docs/sandbox.md).
    size = (box.workdir / "fill").stat().st_size
    assert size < 120 * MiB, size
    assert box.usage().oom_kills >= 1


def test_a_dev_shm_hog_counts_against_memory(make_sandbox):
    box = make_sandbox(memory_bytes=96 * MiB, shm_bytes=512 * MiB)
    res = box.run("dd if=/dev/zero of=/dev/shm/fill bs=1M count=400 2>&1", timeout=60)
    # Measured from the host (both runtimes keep /dev/shm as a capped host tmpfs beside /workdir):
    # once the fill holds the memory, no new command can start in the sandbox to measure it.
    assert os.stat(box.workdir.parent / "shm" / "fill").st_size < 120 * MiB, res.text


def test_a_sysv_shared_memory_hog_is_stopped_at_the_memory_limit(make_sandbox):
    box = make_sandbox(memory_bytes=96 * MiB)
    hog = (
        "import ctypes; libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "size = 400 * 1024**2\n"
        "sid = libc.shmget(0, ctypes.c_size_t(size), 0o1600)\n"
        "assert sid >= 0, ctypes.get_errno()\n"
        "addr = libc.shmat(sid, None, 0)\n"
        "print('attached', flush=True)\n"
        "ctypes.memset(addr, 1, size)\n"
        "print('filled', flush=True)\n"
    )
    res = box.run([PY, "-c", hog], timeout=60)
    assert "attached" in res.text
    assert "filled" not in res.text
    assert res.signal == 9
    assert harness_can_start_processes()


def test_a_fork_bomb_is_contained_and_the_harness_can_still_start_processes(make_sandbox, runtime):
    box = make_sandbox(pids=64)
    res = box.run("bomb() { bomb | bomb & }; bomb; sleep 3; echo survived", timeout=10)
    assert harness_can_start_processes()
    assert len(box.processes()) <= 64
    if runtime == "bwrap":
        assert box.usage().pids_limit_hits > 0
    # Under gVisor the cap is RLIMIT_NPROC inside its kernel; the host cgroup's pids.max (the
    # sentry's threads) is never reached, which is the point: the sentry must survive.
    report = box.kill_all()
    assert report.empty, report
    assert res.exit_code is not None or res.timed_out


def test_a_disk_fill_stops_at_the_workdir_quota(make_sandbox):
    box = make_sandbox(workdir_bytes=16 * MiB)
    res = box.run("dd if=/dev/zero of=/workdir/fill bs=1M count=64 2>&1; wc -c < /workdir/fill", timeout=30)
    assert "No space left on device" in res.text
    assert int(res.text.split()[-1]) <= 16 * MiB


def test_a_disk_fill_stops_at_the_tmp_quota(make_sandbox):
    box = make_sandbox(tmp_bytes=8 * MiB)
    res = box.run("dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; wc -c < /tmp/fill", timeout=30)
    assert "No space left on device" in res.text
    assert int(res.text.split()[-1]) <= 8 * MiB


def test_an_inode_fill_stops_at_the_workdir_quota(make_sandbox):
    box = make_sandbox(workdir_inodes=500)
    res = box.run("cd /workdir; for i in $(seq 1000); do : > f$i || break; done 2>&1 | tail -1; ls | wc -l", timeout=60)
    assert "No space left on device" in res.text
    assert int(res.text.split()[-1]) < 500


def test_a_cpu_hog_is_held_to_its_quota_and_the_harness_stays_responsive(make_sandbox):
    box = make_sandbox(cpus=0.5)
    hog = box.spawn(["/bin/sh", "-c", "for i in 1 2 3 4; do (while :; do :; done) & done; wait"])
    try:
        time.sleep(0.5)  # let the hogs start
        before_ns, t0 = box.usage().cpu_ns, time.monotonic()
        latencies = []
        for _ in range(40):
            start = time.perf_counter()
            time.sleep(0.02)
            latencies.append(time.perf_counter() - start - 0.02)
        used_cores = (box.usage().cpu_ns - before_ns) / 1e9 / (time.monotonic() - t0)
    finally:
        hog.kill_tree()
    # Four busy loops on this machine would use every core; the quota holds them to half of one.
    assert used_cores < 0.65, used_cores
    assert statistics.median(latencies) < 0.02, latencies


def test_two_sandboxes_hogging_cpu_leave_the_harness_responsive(make_sandbox):
    boxes = [make_sandbox(cpus=1.0) for _ in range(2)]
    hogs = [b.spawn(["/bin/sh", "-c", "for i in 1 2; do (while :; do :; done) & done; wait"]) for b in boxes]
    try:
        time.sleep(0.3)
        done = threading.Event()
        start = time.perf_counter()
        threading.Thread(target=lambda: (sum(range(2_000_000)), done.set())).start()
        assert done.wait(10)
        assert time.perf_counter() - start < 2.0
    finally:
        for h in hogs:
            h.kill_tree()


def test_all_sandboxes_together_leave_the_harness_headroom(make_sandbox, monkeypatch):
    from proctor.sandbox import cgroups

    lay = cgroups.layout()
    top_memory = lay.mounts["memory"] / cgroups.ROOT_NAME / ("memory.max" if lay.version == 2 else "memory.limit_in_bytes")
    make_sandbox()
    assert int(cgroups._read(top_memory)) <= cgroups._host_memory_bytes() - 512 * MiB
    # Shrink the shared budget to see the kernel hold it: a task asking for 1 GiB gets 200 MiB.
    budget = cgroups.harness_headroom()
    monkeypatch.setattr(cgroups, "harness_headroom", lambda: (200 * MiB, budget[1]))
    try:
        box = make_sandbox(memory_bytes=1024 * MiB)
        res = box.run([PY, "-c", "x = bytearray(600 * 1024**2); print('took it')"], timeout=60)
        assert "took it" not in res.text and res.signal == 9
        assert subprocess.run(["/bin/true"]).returncode == 0
    finally:
        monkeypatch.undo()
        make_sandbox()  # writes the real budget back
    assert abs(int(cgroups._read(top_memory)) - budget[0]) < 4096  # the kernel rounds to pages

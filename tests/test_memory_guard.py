"""The memory guard: a sandbox thrashing at its memory limit (its code pages, charged to it by
its private system image, evicted and read back forever) is OOM-killed and counted, as the kernel
would have; an honest program below the margin, or at the limit but not thrashing, is left alone."""

from __future__ import annotations

import pytest

from proctor.detectors import resource_events
from proctor.sandbox import memory_guard
from proctor.sandbox.memory_guard import MiB, Watched

LIMIT = 256 * MiB

# Fill anonymous memory to `left` bytes under the limit, then read the system's files for
# `seconds` (each file a page-cache page charged to the sandbox, as code pages are).
HOLD_AND_READ = r"""
import mmap, os, sys, time
limit, left, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
anon = int(next(l for l in open('/proc/self/status') if l.startswith('RssAnon')).split()[1]) * 1024
m = mmap.mmap(-1, limit - left - anon - (4 << 20))
for i in range(0, len(m), 4096):
    m[i] = 1
print('holding', flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for d, _, files in os.walk('/usr/lib'):
        for name in files:
            try:
                with open(os.path.join(d, name), 'rb') as f:
                    while f.read(1 << 20) and time.monotonic() < end:
                        pass
            except OSError:
                pass
            if time.monotonic() > end:
                break
        if time.monotonic() > end:
            break
print('survived', flush=True)
"""


def _hold_and_read(box, left: int, seconds: float):
    return box.run(["python3", "-c", HOLD_AND_READ, str(LIMIT), str(left), str(seconds)], timeout=seconds + 30)


def test_a_program_thrashing_at_the_limit_is_oom_killed_and_flagged(make_sandbox):
    box = make_sandbox(memory_bytes=LIMIT)
    res = _hold_and_read(box, 2 * MiB, 20)
    # The kernel alone never kills it (reclaim always finds a page to evict): without the guard
    # it reads on for the whole 20 s and says "survived".
    assert "holding" in res.text and "survived" not in res.text and res.signal == 9, res
    assert res.duration_s < 15, res.duration_s
    assert box.usage().oom_kills >= 1
    assert [e.kind for e in resource_events(box)] == ["resource_limit_hit"]


def test_honest_programs_near_the_limit_are_left_alone(make_sandbox):
    box = make_sandbox(memory_bytes=LIMIT)
    # Anonymous memory a little further from the limit than the margin, reading files hard.
    res = _hold_and_read(box, memory_guard.margin(LIMIT) + 40 * MiB, 4)
    assert res.text == "holding\nsurvived\n" and res.exit_code == 0, res
    assert box.usage().oom_kills == 0 and resource_events(box) == []
    # Within the margin of the limit (7 MiB under it), but not thrashing: it holds its memory and
    # sleeps. (A fresh sandbox: the reads above left kernel memory charged to the first.)
    box = make_sandbox(memory_bytes=LIMIT)
    res = box.run(["python3", "-c", HOLD_AND_READ.replace("while time.monotonic() < end:", "time.sleep(seconds)\nwhile False:"),
                   str(LIMIT), str(3 * MiB), "3"], timeout=30)
    assert res.text == "holding\nsurvived\n" and res.exit_code == 0, res
    assert box.usage().oom_kills == 0 and resource_events(box) == []


class _Cgroup:
    """The two readings the guard takes, set by the test; and the pids it may kill."""

    def __init__(self) -> None:
        self.now, self.stuck, self.refaults = 0, 0, 0

    def memory_now(self) -> int:
        return self.now

    def memory_pressure(self) -> tuple[int, int]:
        return self.stuck, self.refaults

    def pids(self) -> list[int]:
        return []


@pytest.mark.parametrize(("stuck_under_limit", "refaults_per_s", "killed"), [
    (0, 0, False),                       # full, but nothing is read back: a program holding its memory
    (0, 999, False),                     # a trickle of refaults
    (0, 5000, True),                     # full and thrashing
    (9 * MiB, 50_000, False),            # thrashing page cache with room left: reclaim is working
])
def test_the_guard_acts_only_when_memory_is_stuck_at_the_limit_and_file_pages_thrash(monkeypatch, stuck_under_limit, refaults_per_s, killed):
    cg = _Cgroup()
    watched = Watched(cg, LIMIT, uid=12345)  # type: ignore[arg-type]
    kills = []
    monkeypatch.setattr(Watched, "_kill_biggest", lambda self: kills.append(1) or True)
    cg.now, cg.stuck = LIMIT, LIMIT - stuck_under_limit
    for tick in range(8):  # 1.4 s of ticks, each with its share of refaults
        cg.refaults = int(refaults_per_s * tick * memory_guard.TICK_S)
        watched.check(tick * memory_guard.TICK_S)
    assert bool(kills) is killed and watched.kills == len(kills)
    # A burst of refaults (a program filling its memory) followed by calm is not thrashing.
    cg.refaults += 100_000
    for tick in range(10):
        watched.check(1.4 + tick * memory_guard.TICK_S)
    assert watched.kills == len(kills)
    # Below the edge on the cheap reading, the expensive one is never taken.
    cg.now, cg.stuck = 0, LIMIT
    for tick in range(20):
        cg.refaults += 10_000
        watched.check(2 + tick * memory_guard.TICK_S)
    assert watched.kills == len(kills)

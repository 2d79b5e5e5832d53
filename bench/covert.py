"""Bandwidth of the covert channels a sandbox cannot close on this runtime, measured with a
sender in one real sandbox and a receiver in another, both as students.

    python bench/covert.py [--json] [--bits N]

1. page cache: the sender reads one byte of chosen 1 MiB-spaced pages of cold files under /usr
   (read-only overlays still share the lower files' page cache); the receiver times its own first
   read of every page (fast = cached = 1). Between rounds the harness evicts the files' pages
   (as a student could by switching to files nobody has read).
4. futex on a shared file mapping: in each 5 ms slot the receiver waits on a futex at offset 0
   of a MAP_SHARED mapping of a /usr file, the sender wakes (1) or not (0).
5. pagemap: the sender maps chosen pages of a /usr file; the receiver reads /proc/self/pagemap's
   exclusively-mapped bit of each page.
3. TCP socket count: /proc/net/sockstat's `alloc` is host-wide although /proc/net is the
   network namespace's; the sender holds 4*v sockets (v a 4-bit symbol) per 50 ms slot.
2. CPU contention: in each 50 ms slot the sender spins (1) or sleeps (0); the receiver counts
   its own loop iterations per slot and reads /proc/uptime's idle column (host-global).

Each reports bits sent, errors, and the information rate: the capacity of a binary symmetric
channel with the measured error rate, per second of channel time (the sender's and receiver's
run time; sandbox start and the harness's eviction are not counted)."""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.sandbox import Sandbox, SandboxSpec  # noqa: E402

SPACING = 1 << 20  # beyond the kernel's readahead window, so one probe loads no neighbour
SEND_PAGES = """
import os, sys, time
t = time.perf_counter()
for item in sys.stdin.read().split():
    path, off = item.rsplit("@", 1)
    fd = os.open(path, os.O_RDONLY); os.pread(fd, 1, int(off)); os.close(fd)
print(time.perf_counter() - t)
"""
PROBE_PAGES = """
import os, sys, time
items = sys.stdin.read().split()
fds = {}
out = []
t = time.perf_counter()
for item in items:
    path, off = item.rsplit("@", 1)
    fd = fds.get(path) or fds.setdefault(path, os.open(path, os.O_RDONLY))
    a = time.perf_counter_ns(); os.pread(fd, 1, int(off)); out.append(time.perf_counter_ns() - a)
print(time.perf_counter() - t)
print(" ".join(map(str, out)))
"""
SEND_CPU = """
import sys, time
t0, slot, bits = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
for i, b in enumerate(bits):
    end = t0 + (i + 1) * slot
    while time.time() < t0 + i * slot: time.sleep(0.001)
    if b == "1":
        while time.time() < end: pass
    else:
        time.sleep(max(0.0, end - time.time()))
"""
PROBE_CPU = """
import sys, time
t0, slot, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
idle = lambda: float(open("/proc/uptime").read().split()[1])
rows = []
for i in range(n):
    while time.time() < t0 + i * slot: pass
    end, k, i0 = t0 + (i + 1) * slot - 0.002, 0, idle()
    while time.time() < end: k += 1
    rows.append(f"{k}:{idle() - i0:.3f}")
print(" ".join(rows))
"""


def capacity(bits: int, errors: int) -> float:
    """Bits of information per bit sent: a binary symmetric channel with the measured error rate
    (a receiver that reads the same value whatever is sent gets nothing: its callers say 0)."""
    p = min(errors / bits, 1 - errors / bits) if bits else 0.5
    return 1.0 if p == 0 else 1 + p * math.log2(p) + (1 - p) * math.log2(1 - p)


SEND_SOCKETS = """
import socket, sys, time
t0, slot, symbols, step = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3].split(","), int(sys.argv[4])
for i, v in enumerate(symbols):
    while time.time() < t0 + i * slot: time.sleep(0.0005)
    held = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(int(v) * step)]
    time.sleep(max(0.0, t0 + (i + 1) * slot - time.time()))
    for s in held: s.close()
"""
PROBE_SOCKETS = """
import sys, time
t0, slot, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
def alloc():
    for line in open("/proc/net/sockstat"):
        if line.startswith("TCP:"):
            f = line.split(); return int(f[f.index("alloc") + 1])
base = alloc()
out = []
for i in range(n):
    while time.time() < t0 + (i + 0.5) * slot: time.sleep(0.0005)
    out.append(alloc() - base)
print(" ".join(map(str, out)))
"""


def cold_files(min_bytes: int = 2 << 20, limit: int = 200) -> list[str]:
    found = []
    for root in ("/usr/lib", "/usr/share"):
        for dirpath, _, names in os.walk(root):
            for name in names:
                p = os.path.join(dirpath, name)
                try:
                    if not os.path.islink(p) and os.path.getsize(p) >= min_bytes:
                        found.append(p)
                except OSError:
                    pass
                if len(found) >= limit:
                    return found
    return found


def evict(files: list[str]) -> None:
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def decide(values: list[float], high_is_one: bool) -> list[int]:
    """Two clusters by 2-means on the logarithms (e.g. 2 µs cached against 100 µs from disk)."""
    logs = [math.log(max(v, 1e-9)) for v in values]
    lo, hi = min(logs), max(logs)
    for _ in range(20):
        cut = (lo + hi) / 2
        low = [x for x in logs if x <= cut] or [lo]
        high = [x for x in logs if x > cut] or [hi]
        lo, hi = sum(low) / len(low), sum(high) / len(high)
    return [int((x > cut) == high_is_one) for x in logs]


def page_cache(sender: Sandbox, receiver: Sandbox, bits: int) -> dict:
    files = cold_files()
    slots = [f"{p}@{off}" for p in files for off in range(0, os.path.getsize(p) - 4096, SPACING)][:bits]
    if len(slots) < 2:
        return {"bits": 0, "note": "no large read-only files under /usr to probe"}
    evict(files)
    msg = [random.getrandbits(1) for _ in slots]
    sent = sender.run(["python3", "-c", SEND_PAGES], input=" ".join(s for s, b in zip(slots, msg) if b).encode(), timeout=120)
    res = receiver.run(["python3", "-c", PROBE_PAGES], input=" ".join(slots).encode(), timeout=120)
    lines = res.text.split("\n")
    ns = [int(x) for x in lines[1].split()]
    got = decide(ns, high_is_one=False)
    errors = sum(a != b for a, b in zip(msg, got))
    seconds = float(sent.text.strip()) + float(lines[0])
    cached = sorted(n for n, b in zip(ns, msg) if b)
    cold = sorted(n for n, b in zip(ns, msg) if not b)
    evict(files)
    return {
        "bits": len(slots), "errors": errors, "seconds": round(seconds, 3),
        "bits_per_s": round(len(slots) * capacity(len(slots), errors) / seconds, 1),
        "median_cached_us": cached[len(cached) // 2] / 1000 if cached else None,
        "median_cold_us": cold[len(cold) // 2] / 1000 if cold else None,
    }


def cpu_contention(sender: Sandbox, receiver: Sandbox, bits: int, slot: float = 0.05) -> dict:
    msg = "".join(random.choice("01") for _ in range(bits))
    t0 = time.time() + 1.5
    proc = sender.spawn(["python3", "-c", SEND_CPU, str(t0), str(slot), msg])
    res = receiver.run(["python3", "-c", PROBE_CPU, str(t0), str(slot), str(bits)], timeout=60 + bits * slot)
    proc.popen.wait(timeout=30)
    rows = [r.split(":") for r in res.text.split()]
    if len(rows) != bits:
        return {"bits": 0, "note": f"receiver failed (exit {res.exit_code}): {res.stderr.decode(errors='replace').strip()[-300:]}"}
    out = {"bits": bits, "slot_s": slot}
    for name, col, high_is_one in (("loop", 0, False), ("uptime_idle", 1, False)):
        got = decide([float(r[col]) for r in rows], high_is_one)
        errors = sum(int(a) != b for a, b in zip(msg, got))
        out[f"{name}_errors"] = errors
        out[f"{name}_bits_per_s"] = round(capacity(bits, errors) / slot, 2)
    return out


def socket_count(sender: Sandbox, receiver: Sandbox, symbols: int, slot: float = 0.05, levels: int = 16, step: int = 4) -> dict:
    """/proc/net/sockstat's TCP `alloc` counts every TCP socket on the host, whatever its network
    namespace: the sender holds step*v sockets during slot i, the receiver reads the count."""
    msg = [random.randrange(levels) for _ in range(symbols)]
    t0 = time.time() + 1.5
    proc = sender.spawn(["python3", "-c", SEND_SOCKETS, str(t0), str(slot), ",".join(map(str, msg)), str(step)])
    res = receiver.run(["python3", "-c", PROBE_SOCKETS, str(t0), str(slot), str(symbols)], timeout=60 + symbols * slot)
    proc.popen.wait(timeout=30)
    got = [round(int(x) / step) for x in res.text.split()]
    errors = sum(a != b for a, b in zip(msg, got))
    bits = math.log2(levels)
    return {"symbols": symbols, "bits_per_symbol": bits, "slot_s": slot, "symbol_errors": errors,
            "bits_per_s_lower_bound": round(max(0.0, bits * (symbols - errors) / symbols - (1 if errors else 0)) / slot, 1)}


MAP_LIB = """
import ctypes, os, platform, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
FUTEX = {"x86_64": 202, "aarch64": 98}[platform.machine()]
def shared_map(path, length):  # PROT_READ, MAP_SHARED: one page-cache page per file page
    return libc.mmap(None, length, 1, 1, os.open(path, os.O_RDONLY), 0)
"""
SEND_FUTEX = MAP_LIB + """
t0, slot, bits, path = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
addr = shared_map(path, 4096)
for i, b in enumerate(bits):
    while time.time() < t0 + (i + 0.3) * slot: pass
    while b == "1" and time.time() < t0 + (i + 0.9) * slot:
        libc.syscall(FUTEX, ctypes.c_void_p(addr), 1, 2**31 - 1, None, None, 0)
"""
RECEIVE_FUTEX = MAP_LIB + """
class timespec(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
t0, slot, n, path = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
addr = shared_map(path, 4096)
val = ctypes.c_uint32.from_address(addr).value
got = []
for i in range(n):
    while time.time() < t0 + (i + 0.1) * slot: pass
    left = t0 + (i + 0.95) * slot - time.time()
    r = libc.syscall(FUTEX, ctypes.c_void_p(addr), 0, val, ctypes.byref(timespec(0, max(1, int(left * 1e9)))), None, 0)
    got.append("1" if r == 0 else "0")
print("".join(got))
"""
HOLD_PAGES = MAP_LIB + """
path, bits = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDONLY)
for i, b in enumerate(bits):
    if b == "1":
        # One page per mapping: a fault maps the cached neighbours of a page too (fault-around).
        addr = libc.mmap(None, 4096, 1, 1, fd, 4096 * i)
        ctypes.c_char.from_address(addr).value  # fault in: now mapped twice
print("held", flush=True)
sys.stdin.read()
"""
PROBE_PAGEMAP = MAP_LIB + """
path, n = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
addr = shared_map(path, 4096 * n)
pm = os.open("/proc/self/pagemap", os.O_RDONLY)
bits = []
for i in range(n):
    ctypes.c_char.from_address(addr + 4096 * i).value
    entry = struct.unpack("<Q", os.pread(pm, 8, (addr // 4096 + i) * 8))[0]
    bits.append("0" if entry >> 56 & 1 else "1")  # not exclusive: someone else maps it
print(time.perf_counter() - t)
print("".join(bits))
"""
FUTEX_FILE = "/usr/share/common-licenses/GPL-3"


def futex(sender: Sandbox, receiver: Sandbox, bits: int, slot: float = 0.005) -> dict:
    """A futex on a MAP_SHARED mapping of a read-only file: in slot i the receiver waits on the
    word at offset 0 and the sender wakes it (1) or not (0). The kernel keys the futex on the
    file's inode, so the channel exists iff the two mappings are of one inode."""
    msg = "".join(random.choice("01") for _ in range(bits))
    t0 = time.time() + 1.5
    proc = sender.spawn(["python3", "-c", SEND_FUTEX, str(t0), str(slot), msg, FUTEX_FILE])
    res = receiver.run(["python3", "-c", RECEIVE_FUTEX, str(t0), str(slot), str(bits), FUTEX_FILE], timeout=60 + bits * slot)
    proc.popen.wait(timeout=30)
    if len(res.text.strip()) != bits:
        return {"bits": 0, "note": f"receiver failed: {res.stderr.decode(errors='replace').strip()[-300:]}"}
    errors = sum(a != b for a, b in zip(msg, res.text.strip()))
    return {"bits": bits, "slot_s": slot, "errors": errors, "ones_received": res.text.count("1"),
            "bits_per_s": round(capacity(bits, errors) / slot, 1) if len(set(res.text.strip())) > 1 else 0.0}


def pagemap(sender: Sandbox, receiver: Sandbox, bits: int) -> dict:
    """/proc/self/pagemap's exclusively-mapped bit: the sender maps page i of a read-only file
    nobody else maps (1) or not (0); the receiver maps every page and reads the bit."""
    files = [p for p in cold_files(min_bytes=4096 * bits) if p.startswith("/usr/share/")] or cold_files(min_bytes=4096 * bits)
    msg = "".join(random.choice("01") for _ in range(bits))
    holder = sender.spawn(["python3", "-c", HOLD_PAGES, files[0], msg])
    assert holder.popen.stdout.readline() == b"held\n"
    res = receiver.run(["python3", "-c", PROBE_PAGEMAP, files[0], str(bits)], timeout=60)
    holder.kill_tree()
    seconds, got = res.text.split()
    errors = sum(a != b for a, b in zip(msg, got))
    return {"bits": bits, "errors": errors, "ones_received": got.count("1"), "seconds": round(float(seconds), 4),
            "bits_per_s": round(bits * capacity(bits, errors) / float(seconds), 1) if len(set(got)) > 1 else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", type=int, default=256)
    ap.add_argument("--slot", type=float, default=0.05, help="seconds per bit of the CPU channel")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with Sandbox.create(SandboxSpec()) as sender, Sandbox.create(SandboxSpec()) as receiver:
        result = {"page_cache": page_cache(sender, receiver, args.bits), "futex": futex(sender, receiver, args.bits),
                  "pagemap": pagemap(sender, receiver, args.bits), "cpu_contention": cpu_contention(sender, receiver, min(args.bits, 64), args.slot),
                  "tcp_socket_count": socket_count(sender, receiver, min(args.bits, 64))}
    if args.json:
        print(json.dumps(result))
    else:
        for name, figures in result.items():
            print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()

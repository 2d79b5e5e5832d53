"""What the bash tool and custody cost, against raw baselines measured in the same run.

    python bench/tools_custody.py [--quick] [--json]

1. bash tool round trip (`true`) in a live session, against a raw pipe echo round trip through `cat`.
2. custody of a 1 GiB tree of 10 000 files, against `cp -a` of the same tree.

Needs what the sandbox needs: Linux, root, bubblewrap, cgroups (`make setup`)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.custody import CustodyLimits, take_custody  # noqa: E402
from proctor.sandbox import Sandbox  # noqa: E402
from proctor.tools import BashTool, ToolContext  # noqa: E402

MiB = 1024 * 1024


def bench_bash(n: int) -> dict:
    cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    tool, tool_s, pipe_s = BashTool(), [], []
    with Sandbox.create() as box, ToolContext(box) as ctx:
        tool.run({"command": "true"}, ctx)  # start the session
        for i in range(n):
            for which in ((0, 1) if i % 2 else (1, 0)):  # alternate which goes first
                start = time.perf_counter()
                if which:
                    result = tool.run({"command": "true"}, ctx)
                    assert result.exit_code == 0, result
                    tool_s.append(time.perf_counter() - start)
                else:
                    cat.stdin.write(b"x\n")  # type: ignore[union-attr]
                    assert cat.stdout.read(2) == b"x\n"  # type: ignore[union-attr]
                    pipe_s.append(time.perf_counter() - start)
    cat.stdin.close()  # type: ignore[union-attr]
    cat.wait()
    t, p = statistics.median(tool_s), statistics.median(pipe_s)
    return {"n": n, "tool_ms": t * 1e3, "pipe_ms": p * 1e3, "ratio": t / p}


def make_tree(root: Path, files: int, total: int) -> None:
    size = total // files
    chunk = os.urandom(size)
    for i in range(files):
        d = root / f"d{i // 100:03d}"
        if i % 100 == 0:
            d.mkdir(parents=True)
        (d / f"f{i:05d}.bin").write_bytes(chunk)


def bench_custody(files: int, total: int, rounds: int) -> dict:
    limits = CustodyLimits(max_file_bytes=total, max_total_bytes=2 * total, max_entries=2 * files + 1000, max_depth=8)
    ours, cps = [], []
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        make_tree(src / "out", files, total)
        for i in range(rounds):
            for which in ((0, 1) if i % 2 else (1, 0)):
                dest = Path(tmp) / f"dest{i}{which}"
                start = time.perf_counter()
                if which:
                    report = take_custody(src, ["out"], dest, student_uid=None, limits=limits)
                    assert report.ok and report.items[0].files == files, report.items[0]
                    ours.append(time.perf_counter() - start)
                else:
                    subprocess.run(["cp", "-a", str(src / "out"), str(dest)], check=True)
                    cps.append(time.perf_counter() - start)
                shutil.rmtree(dest)
    o, c = statistics.median(ours), statistics.median(cps)
    return {"files": files, "bytes": total, "rounds": rounds, "custody_s": o, "cp_a_s": c, "ratio": o / c,
            "custody_mib_s": total / MiB / o, "cp_a_mib_s": total / MiB / c}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples and a 64 MiB tree (smoke run)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    bash = bench_bash(20 if args.quick else 200)
    custody = bench_custody(1000 if args.quick else 10_000, (64 if args.quick else 1024) * MiB, 1 if args.quick else 3)
    if args.json:
        print(json.dumps({"bash": bash, "custody": custody}, indent=2))
        return
    print(f"bash tool round trip   n={bash['n']:<5} {bash['tool_ms']:8.2f} ms   raw pipe echo {bash['pipe_ms']:8.3f} ms   ratio {bash['ratio']:8.1f}x")
    print(f"custody {custody['files']} files, {custody['bytes'] // MiB} MiB   {custody['custody_s']:8.3f} s ({custody['custody_mib_s']:.0f} MiB/s)"
          f"   cp -a {custody['cp_a_s']:8.3f} s ({custody['cp_a_mib_s']:.0f} MiB/s)   ratio {custody['ratio']:.2f}x")


if __name__ == "__main__":
    main()

"""What the planted-code detectors (proctor/planted.py) cost at a step's end when the student's
workdir holds a Python project, and what caching per file version saves.

    python bench/planted_scan.py [--files N] [--steps S] [--quick] [--json]

The workdir: N .py files copied from this Python's standard library into a temporary directory.
Each arm runs S step-end scans: `cold` keeps no cache between steps (every file read and parsed
each time, as before the cache), `warm` keeps the per-sandbox caches the detectors keep (files
read, and the facts found in each Python file, again only when its inode, size, mtime or ctime
changed). Prints the median ms per step of each arm and their ratio, measured in this process.
Needs nothing but Python (no sandbox: the detectors read host paths)."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor import planted  # noqa: E402


def _project(root: Path, count: int) -> int:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    copied = 0
    for source in sorted(stdlib.rglob("*.py")):
        if copied >= count:
            break
        if "site-packages" in source.parts or "test" in source.parts:
            continue
        dest = root / "project" / source.relative_to(stdlib)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)
        copied += 1
    return copied


def _step(places: dict[str, Path], cache: dict, facts: dict) -> float:
    t = time.perf_counter()
    scan = planted._scan(places, cache)
    planted._python_events(scan, facts)
    planted._forged_events(scan, {})
    return (time.perf_counter() - t) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000, help="Python files in the workdir")
    parser.add_argument("--steps", type=int, default=10, help="step ends per arm")
    parser.add_argument("--quick", action="store_true", help="100 files, 3 steps (a smoke run)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args()
    if args.quick:
        args.files, args.steps = 100, 3
    if args.files < 1 or args.steps < 2:
        parser.error("--files must be at least 1 and --steps at least 2")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = _project(root, args.files)
        places = {"/workdir": root}
        cold = [_step(places, {}, {}) for _ in range(args.steps)]
        cache, facts = {}, {}
        first = _step(places, cache, facts)
        warm = [_step(places, cache, facts) for _ in range(args.steps)]
    out = {"files": files, "steps": args.steps, "cold_ms": statistics.median(cold), "warm_first_ms": first,
           "warm_ms": statistics.median(warm)}
    out["ratio_warm_to_cold"] = out["warm_ms"] / out["cold_ms"]
    if args.json:
        print(json.dumps(out))
        return
    print(f"{files} Python files, {args.steps} step ends per arm")
    print(f"cold (no cache):   {out['cold_ms']:8.1f} ms per step (median)")
    print(f"warm (cached):     {out['warm_ms']:8.1f} ms per step (median); its first step {first:.1f} ms")
    print(f"warm / cold:       {out['ratio_warm_to_cold']:8.3f}")


if __name__ == "__main__":
    main()

"""What the syscall filter's loader costs per student command.

    python bench/syscall_filter.py [--quick] [--json]

One command (`true`) in a sandbox whose session is already running, with the filter (the
chain ends in the seccomp loader, and the harness receives its listener) and without it (the
chain as it was before: setpriv execs the command), samples interleaved because these machines
are noisy. Prints the medians and their ratio.

Needs what the sandbox needs: Linux, root, bubblewrap, cgroups (`make setup`)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.errors import ProctorError  # noqa: E402
from proctor.sandbox import Sandbox  # noqa: E402


def _one(box: Sandbox) -> float:
    t = time.perf_counter()
    r = box.run(["true"])
    took = time.perf_counter() - t
    if not r.ok:
        raise SystemExit(f"`true` failed: {r}")
    return took


def bench(n: int) -> dict:
    with_filter: list[float] = []
    without: list[float] = []
    with Sandbox.create() as box:
        recorder = box._syscalls
        assert recorder is not None, "no syscall filter on this machine"
        for _ in range(5):
            box.run(["true"])  # start the session, warm up
        for i in range(n):
            # The sandbox has no switch for its filter (nothing should turn it off); the bench
            # detaches the recorder, which is what makes _student_argv add the loader.
            for filtered in ((True, False) if i % 2 else (False, True)):
                box._syscalls = recorder if filtered else None
                (with_filter if filtered else without).append(_one(box))
        box._syscalls = recorder
    a, b = statistics.median(with_filter), statistics.median(without)
    return {"n": n, "with_filter_ms": a * 1000, "without_ms": b * 1000, "added_ms": (a - b) * 1000, "ratio": a / b}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few samples: a smoke run")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    try:
        res = bench(20 if args.quick else 200)
    except ProctorError as exc:
        print(f"bench: cannot build a sandbox on this machine: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"one command (`true`) in a running session, median of {res['n']} each:")
        print(f"  with the syscall filter   {res['with_filter_ms']:8.2f} ms")
        print(f"  without                   {res['without_ms']:8.2f} ms")
        print(f"  added                     {res['added_ms']:8.2f} ms   ratio {res['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

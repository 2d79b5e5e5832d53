"""A batch over a local Ray cluster against the same batch without Ray, in the same process.

    python bench/ray_batch.py [--quick] [--json]

The 10-call scripted rollout of bench/pool.py, `run_many -n N -j J` on this machine, then the same
with `ray="auto"` on a Ray cluster started here (ray.init, one CPU a rollout slot, no dashboard).
Prints rollouts per second of each and the ratio (goal: Ray within 1.3x). Ray's start-up is
measured apart and left out of its rate. Every rollout must score 1.

Needs the sandbox (root, bubblewrap, cgroups) and the ray extra (`pip install -e '.[ray]'`)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ray  # noqa: E402

from pool import EXAMPLE, SCRIPT  # noqa: E402
from proctor.runner import run_many  # noqa: E402
from proctor.tasks import load_environment  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n, j = (4, 2) if args.quick else (40, 2)
    env = load_environment(str(EXAMPLE))
    res: dict = {"n": n, "parallel": j}
    with tempfile.TemporaryDirectory() as tmp:
        agent = Path(tmp) / "ten.json"
        agent.write_text(json.dumps(SCRIPT))
        spec = f"script:{agent}"
        run_many(env, "q3-revenue", spec, Path(tmp) / "warm", n=1)
        t = time.perf_counter()
        ray.init(num_cpus=j, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 object_store_memory=100 * 1024 * 1024)
        res["ray_start_s"] = time.perf_counter() - t
        try:
            run_many(env, "q3-revenue", spec, Path(tmp) / "ray-warm", n=j, parallel=j, ray="auto")  # workers up
            for which in ("local", "ray", "local", "ray") if not args.quick else ("local", "ray"):
                t = time.perf_counter()
                out = Path(tmp) / f"{which}-{time.monotonic_ns()}"
                results = run_many(env, "q3-revenue", spec, out, n=n, parallel=j, ray="auto" if which == "ray" else None)
                wall = time.perf_counter() - t
                assert [r.score for r in results] == [1.0] * n, [(r.status, r.errors) for r in results if r.score != 1.0][:3]
                res.setdefault(which, []).append(n / wall)
        finally:
            ray.shutdown()
    local, remote = max(res["local"]), max(res["ray"])
    res.update(local_per_s=local, ray_per_s=remote, ratio=local / remote)
    if args.json:
        print(json.dumps(res))
    else:
        print(f"10-call rollout, -n {n} -j {j}: {local:.2f} rollouts/s without Ray, {remote:.2f}/s on a local Ray cluster: "
              f"{local / remote:.2f}x (best of rounds; Ray's start-up {res['ray_start_s']:.1f} s left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

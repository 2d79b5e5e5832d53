"""Episodes stepped from this process: on a local Ray cluster (RayEpisode) against in process
(Episode), the same 10-call rollout, one after another.

    python bench/ray_episode.py [--quick] [--json]

Prints the median time of one step (a tool call's round trip) and of a whole rollout (reset to
result on the driver's disk) each way, and their ratios. Ray's start-up is measured apart and left
out. Every rollout must score 1.

Needs the sandbox (root, bubblewrap, cgroups) and the ray extra (`pip install -e '.[ray]'`)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ray  # noqa: E402

from pool import EXAMPLE, SCRIPT  # noqa: E402
from proctor.episode import Episode  # noqa: E402
from proctor.ray_episode import RayEpisode  # noqa: E402
from proctor.tasks import load_environment  # noqa: E402


def _one(make) -> tuple[float, list[float]]:
    """A whole rollout's seconds and each of its steps' seconds."""
    t0 = time.perf_counter()
    ep = make()
    ep.reset("q3-revenue")
    steps = []
    for turn in SCRIPT["turns"]:
        t = time.perf_counter()
        out = ep.step({"tool": turn["tool"], "arguments": turn["arguments"]})
        steps.append(time.perf_counter() - t)
    assert out.done and out.reward == 1.0, out.info
    return time.perf_counter() - t0, steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n = 2 if args.quick else 10
    env = load_environment(str(EXAMPLE))
    res: dict = {"n": n}
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 object_store_memory=100 * 1024 * 1024)
        res["ray_start_s"] = time.perf_counter() - t
        try:
            makers = {"local": lambda: Episode(Path(tmp) / "local", env=env),
                      "ray": lambda: RayEpisode(Path(tmp) / "ray", env=env, address="auto")}
            for which in makers:  # warm both (the first actor process, imports, the system image's cache)
                _one(makers[which])
            walls: dict[str, list[float]] = {"local": [], "ray": []}
            steps: dict[str, list[float]] = {"local": [], "ray": []}
            for _ in range(n):
                for which, make in makers.items():  # interleaved: the machine's noise falls on both
                    wall, each = _one(make)
                    walls[which].append(wall)
                    steps[which] += each[:-1]  # the submit step also grades: not a round trip
        finally:
            ray.shutdown()
    for which in ("local", "ray"):
        res[f"{which}_step_ms"] = statistics.median(steps[which]) * 1000
        res[f"{which}_rollout_s"] = statistics.median(walls[which])
    res["step_ratio"] = res["ray_step_ms"] / res["local_step_ms"]
    res["rollout_ratio"] = res["ray_rollout_s"] / res["local_rollout_s"]
    if args.json:
        print(json.dumps(res))
    else:
        print(f"10-call episode, {n} each way: a step {res['local_step_ms']:.1f} ms in process, {res['ray_step_ms']:.1f} ms "
              f"through a Ray actor ({res['step_ratio']:.2f}x); a rollout {res['local_rollout_s']:.2f} s against "
              f"{res['ray_rollout_s']:.2f} s ({res['rollout_ratio']:.2f}x; Ray's start-up {res['ray_start_s']:.1f} s left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

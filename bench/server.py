"""What `proctor serve` adds to each step, against a direct `Episode.step`, measured in the same run.

    python bench/server.py [--quick] [--json]

Direct: an Episode in this process, stepped with `bash: true`. Served: the same action through a
`proctor serve` subprocess over one WebSocket (JSON frames, the session's worker thread, the
reply). Each round resets a fresh q3-revenue episode on each side and takes the same number of
steps (under the task's turn budget); rounds alternate which side goes first. The overhead is the
difference of the per-step medians. Goal: under 2 ms.

Needs what the sandbox needs: Linux, root, bubblewrap, cgroups (`make setup`), and the serve extra."""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from websockets.sync.client import connect  # noqa: E402

from proctor.episode import Action, Episode  # noqa: E402
from proctor.tasks import load_environment  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quarterly_revenue"
ACTION = {"tool": "bash", "arguments": {"command": "true"}}


def _serve(out: str) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proctor = str(Path(sys.executable).parent / "proctor")
    proc = subprocess.Popen([proctor, "serve", str(EXAMPLE), "--port", str(port), "--out", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("bench: proctor serve did not come up")


def _direct_round(env, out: str, steps: int) -> list[float]:
    times = []
    with Episode(out, env=env) as ep:
        ep.reset(task="q3-revenue")
        action = Action.model_validate(ACTION)
        for _ in range(steps):
            start = time.perf_counter()
            out_step = ep.step(action)
            times.append(time.perf_counter() - start)
            assert not out_step.done, out_step.info
    return times


def _served_round(port: int, steps: int) -> list[float]:
    times = []
    with connect(f"ws://127.0.0.1:{port}/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task": "q3-revenue"}}))
        assert json.loads(ws.recv())["type"] == "observation"
        frame = json.dumps({"type": "step", "data": ACTION})
        for _ in range(steps):
            start = time.perf_counter()
            ws.send(frame)
            reply = json.loads(ws.recv())
            times.append(time.perf_counter() - start)
            assert reply["type"] == "observation" and not reply["data"]["done"], reply
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds, steps = (2, 10) if args.quick else (6, 30)
    env = load_environment(str(EXAMPLE))
    direct, served = [], []
    with tempfile.TemporaryDirectory() as out:
        proc, port = _serve(out)
        try:
            for i in range(rounds):
                for which in ((0, 1) if i % 2 else (1, 0)):
                    if which:
                        served += _served_round(port, steps)
                    else:
                        direct += _direct_round(env, out, steps)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    d, s = statistics.median(direct), statistics.median(served)
    report = {"rounds": rounds, "steps": rounds * steps, "direct_step_ms": d * 1000, "served_step_ms": s * 1000,
              "overhead_ms": (s - d) * 1000}
    if args.json:
        print(json.dumps(report))
    else:
        print(f"step through proctor serve {s * 1000:.2f} ms vs direct Episode.step {d * 1000:.2f} ms: "
              f"{(s - d) * 1000:+.2f} ms per step ({rounds * steps} steps each, medians; goal < 2 ms)")


if __name__ == "__main__":
    main()

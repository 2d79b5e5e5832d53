"""How fast `proctor view` opens a big batch: the index over 10,000 synthetic rollouts, against
listing the batch directory, measured in the same run.

    python bench/viewer.py [--rollouts N] [--quick] [--json]

The batch is written in the documented format (docs/harness.md): a result.json (statuses,
misbehaviour kinds, tasks, families and agents varied) and a short transcript.jsonl per rollout.
A real viewer (uvicorn on loopback) is timed over HTTP:

- cold index: the first page of a viewer just started (it reads every result.json once);
- warm index: the first page again after the rescan interval (stats every rollout, parses none);
- filtered index: status, kind and a search, sorted by score;
- run page: one rollout's page;
- in Chromium (when /usr/bin/chromium and playwright are installed): the cold index until `load`.

The baseline is listing the batch directory (`os.listdir`), so the ratios say what the viewer
adds to the least any tool must do. The files were just written, so they are in the page cache,
as they are for a batch being watched. Needs only the view extra (no sandbox)."""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.viewer import BackgroundViewer  # noqa: E402
from proctor.viewer.catalog import RESCAN_INTERVAL_S  # noqa: E402

STATUSES = ["completed"] * 6 + ["misbehaved"] * 3 + ["infra_error"]
KINDS = ["submission_symlink", "processes_left_at_custody", "hidden_path_probe", "network_blocked"]
CHROMIUM = "/usr/bin/chromium"


def _result(i: int, rng: random.Random) -> dict:
    status = rng.choice(STATUSES)
    family = rng.choice([None, "fast-kernel", "curate-data"])
    score = 0.0 if status != "completed" else rng.choice([0.0, 0.5, 1.0])
    return {
        "run_id": f"r{i:05d}", "task_id": family or rng.choice(["q3-revenue", "essay"]),
        "instance": {"task_id": family or "q3-revenue", "family": family, "seed": i if family else None,
                     "difficulty": 1 if family else None, "params": {}, "key_fingerprint": None},
        "agent": rng.choice(["oracle", "model:qwen", "model:llama", "script:hack"]), "status": status,
        "score": score, "judged_score": score, "reward": score,
        "steps": [{"index": 0, "score": score, "weight": 1.0, "explanation": "answer.txt: checked", "metadata": {},
                   "judge": "ExactAnswer", "ended_by": "submit", "custody": [{"path": "answer.txt", "status": "copied"}],
                   "duration_s": 0.001}],
        "misbehaviour": [{"kind": rng.choice(KINDS), "detail": "seen", "step": 0}] if status == "misbehaved" else [],
        "errors": ["agent: provider failed"] if status == "infra_error" else [],
        "confinement": {"protections": {"uid_isolation": "enforced", "pid_namespace": "enforced"}, "degraded": []},
        "usage": {"input_tokens": rng.randint(100, 90000), "output_tokens": rng.randint(10, 9000), "turns": 5, "tool_calls": 4},
        "timings": {"started_at": f"2026-12-04T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}+00:00", "total_s": rng.uniform(1, 300)},
        "ended_by": "submit",
    }


def make_batch(root: Path, n: int) -> None:
    rng = random.Random(0)
    for i in range(n):
        d = root / f"r{i:05d}"
        d.mkdir()
        result = _result(i, rng)
        (d / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        events = [{"type": "rollout_start", "seq": 0, "t": 0.0, "run_id": result["run_id"], "task_id": result["task_id"]},
                  {"type": "rollout_end", "seq": 1, "t": 1.0, "status": result["status"]}]
        (d / "transcript.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


class Server(BackgroundViewer):
    def get(self, path: str) -> float:
        started = time.perf_counter()
        with urllib.request.urlopen(self.url + path, timeout=120) as reply:
            reply.read()
            assert reply.status == 200
        return time.perf_counter() - started


def _listing(root: Path, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        os.listdir(root)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _browser_cold(root: Path) -> float | None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not os.access(CHROMIUM, os.X_OK):
        return None
    server = Server([root])
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page()
            started = time.perf_counter()
            page.goto(server.url + "/", wait_until="load", timeout=120_000)
            elapsed = time.perf_counter() - started
            browser.close()
            return elapsed
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="1,000 rollouts, fewer rounds, no browser (for CI's smoke test)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n, rounds = (1_000, 3) if args.quick else (args.rollouts, 5)

    with tempfile.TemporaryDirectory(prefix="proctor-bench-viewer-") as tmp:
        root = Path(tmp) / "batch"
        root.mkdir()
        make_batch(root, n)
        listing = _listing(root, 20)

        colds = []
        for _ in range(rounds):
            server = Server([root])
            try:
                colds.append(server.get("/"))
            finally:
                server.close()
        server = Server([root])
        try:
            server.get("/")
            warm, filtered, run_page = [], [], []
            for _ in range(rounds):
                time.sleep(RESCAN_INTERVAL_S + 0.05)  # so each request rescans the directory
                warm.append(server.get("/"))
                time.sleep(RESCAN_INTERVAL_S + 0.05)
                filtered.append(server.get("/?status=misbehaved&kind=hidden_path_probe&q=model&sort=score&order=asc"))
                run_page.append(server.get("/runs/r00042"))
        finally:
            server.close()
        browser = None if args.quick else _browser_cold(root)

    figures = {
        "rollouts": n,
        "listing_s": listing,
        "cold_index_s": statistics.median(colds),
        "warm_index_s": statistics.median(warm),
        "filtered_index_s": statistics.median(filtered),
        "run_page_s": statistics.median(run_page),
        "browser_cold_index_s": browser,
    }
    figures["cold_ratio"] = figures["cold_index_s"] / listing
    figures["warm_ratio"] = figures["warm_index_s"] / listing
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"proctor view over {n} rollouts (median of {rounds}; baseline: os.listdir of the batch, {listing * 1e3:.2f} ms)")
    print(f"  cold index (fresh viewer, every result.json read): {figures['cold_index_s'] * 1e3:8.1f} ms  ({figures['cold_ratio']:.0f}x listing)")
    print(f"  warm index (rescan: stat only):                    {figures['warm_index_s'] * 1e3:8.1f} ms  ({figures['warm_ratio']:.0f}x listing)")
    print(f"  filtered, searched and sorted index:               {figures['filtered_index_s'] * 1e3:8.1f} ms")
    print(f"  one run page:                                      {figures['run_page_s'] * 1e3:8.1f} ms")
    if browser is not None:
        print(f"  cold index in Chromium, until load:                {browser * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()

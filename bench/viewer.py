"""How fast `proctor view` opens a big batch: the index over 10,000 synthetic rollouts, against
listing the batch directory, measured in the same run.

    python bench/viewer.py [--rollouts N] [--quick] [--json]

The batch is written in the documented format (docs/harness.md): a result.json (statuses,
misbehaviour kinds, tasks, families and agents varied) and a short transcript.jsonl per rollout.
A real viewer (uvicorn on loopback) is timed over HTTP:

- cold index: the first page of a viewer that has read nothing yet (it reads every result.json once:
  what `proctor view` does before it starts listening);
- rescan: what keeping the index current costs (one lstat per rollout, no result re-read), done in a
  background thread while requests are answered from the last scan;
- index: the first page from a running viewer;
- filtered index: status, kind and a search, sorted by score;
- run page: one rollout's page;
- in Chromium (when /usr/bin/chromium and playwright are installed): the index of a running
  `proctor view` (results read at start), from navigation to `load`.

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
from proctor.viewer.catalog import Catalog  # noqa: E402

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


def _browser_index(root: Path) -> float | None:
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
            server = Server([root], index_first=False)
            try:
                colds.append(server.get("/"))
            finally:
                server.close()
        catalog = Catalog([root])
        catalog.refresh(force=True)
        rescans = []
        for _ in range(rounds):
            started = time.perf_counter()
            catalog.refresh(force=True)
            rescans.append(time.perf_counter() - started)

        server = Server([root])
        try:
            index, filtered, run_page = [], [], []
            for _ in range(rounds):
                time.sleep(0.3)  # let any background rescan the last request started finish
                index.append(server.get("/"))
                filtered.append(server.get("/?status=misbehaved&kind=hidden_path_probe&q=model&sort=score&order=asc"))
                run_page.append(server.get("/runs/r00042"))
        finally:
            server.close()
        browser = None if args.quick else _browser_index(root)

    figures = {
        "rollouts": n,
        "listing_s": listing,
        "cold_index_s": statistics.median(colds),
        "rescan_s": statistics.median(rescans),
        "index_s": statistics.median(index),
        "filtered_index_s": statistics.median(filtered),
        "run_page_s": statistics.median(run_page),
        "browser_index_s": browser,
    }
    for name in ("cold_index", "rescan", "index"):
        figures[f"{name}_ratio"] = figures[f"{name}_s"] / listing
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"proctor view over {n} rollouts (median of {rounds}; baseline: os.listdir of the batch, {listing * 1e3:.2f} ms)")
    print(f"  cold index (nothing read yet: every result.json read): {figures['cold_index_s'] * 1e3:8.1f} ms  ({figures['cold_index_ratio']:.0f}x listing)")
    print(f"  rescan (one lstat a rollout, in the background):        {figures['rescan_s'] * 1e3:8.1f} ms  ({figures['rescan_ratio']:.0f}x listing)")
    print(f"  index page from a running viewer:                       {figures['index_s'] * 1e3:8.1f} ms  ({figures['index_ratio']:.0f}x listing)")
    print(f"  filtered, searched and sorted index:                    {figures['filtered_index_s'] * 1e3:8.1f} ms")
    print(f"  one run page:                                           {figures['run_page_s'] * 1e3:8.1f} ms")
    if browser is not None:
        print(f"  index page in Chromium, navigation to load:             {browser * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()

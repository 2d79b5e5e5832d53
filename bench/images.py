"""What a task image costs: its build cold and cached, and a sandbox over its root against a
plain sandbox, measured in the same process (ratios, interleaved samples).

    python bench/images.py [--quick] [--json]

1. build + export of a small Dockerfile over the local base: cold (new content each time, so
   buildah really runs) against cached (the same content again: found by its content hash);
2. create + first command + close of a sandbox over the image's root, against a plain sandbox;
3. one command in a live session (warm), image root against plain.

The base image is made locally with mmdebstrap (no registry), in a store of the bench's own
(PROCTOR_BENCH_IMAGES, default /var/tmp/proctor-images-bench). Needs root, bubblewrap, podman,
buildah, mmdebstrap and erofs-utils (`make setup`)."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proctor.images import ImageStore, TaskImage  # noqa: E402
from proctor.images.base import ensure_debian_base  # noqa: E402
from proctor.sandbox import Sandbox, SandboxSpec  # noqa: E402

BASE = "proctor-bench-base:bookworm"


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def build_once(store: ImageStore, ctx: Path, token: str) -> float:
    (ctx / "Dockerfile").write_text(f"FROM {BASE}\nRUN echo {token} > /opt/token\nENV BENCH=1\nWORKDIR /srv\n")
    t = time.perf_counter()
    store.export(store.build(TaskImage(context=ctx)), "bench")
    return time.perf_counter() - t


def start_once(spec: SandboxSpec) -> float:
    t = time.perf_counter()
    with Sandbox.create(spec) as box:
        box.run(["true"])
    return time.perf_counter() - t


def warm_once(box) -> float:
    t = time.perf_counter()
    box.run(["true"])
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    builds, starts, warms = (2, 3, 10) if args.quick else (4, 10, 50)
    where = Path(os.environ.get("PROCTOR_BENCH_IMAGES", "/var/tmp/proctor-images-bench"))
    store = ImageStore(where / "store", where / "roots")
    ensure_debian_base(store, BASE, cache_dir=where)
    cold, cached = [], []
    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp)
        for _ in range(builds):
            token = secrets.token_hex(8)
            cold.append(build_once(store, ctx, token))
            cached.append(build_once(store, ctx, token))
        root = store.export(store.build(TaskImage(context=ctx)), "bench")
    image_spec, plain_spec = SandboxSpec(image=root), SandboxSpec()
    start_image, start_plain = [], []
    for _ in range(starts):
        start_plain.append(start_once(plain_spec))
        start_image.append(start_once(image_spec))
    warm_image, warm_plain = [], []
    with Sandbox.create(image_spec) as a, Sandbox.create(plain_spec) as b:
        a.run(["true"]), b.run(["true"])
        for _ in range(warms):
            warm_plain.append(warm_once(b))
            warm_image.append(warm_once(a))
    out = {
        "build": {"cold_s": median(cold), "cached_s": median(cached), "cold_over_cached": median(cold) / median(cached)},
        "sandbox_start": {"image_s": median(start_image), "plain_s": median(start_plain),
                          "image_over_plain": median(start_image) / median(start_plain)},
        "warm_command": {"image_s": median(warm_image), "plain_s": median(warm_plain),
                         "image_over_plain": median(warm_image) / median(warm_plain)},
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    b, s, w = out["build"], out["sandbox_start"], out["warm_command"]
    print(f"image build + export: cold {b['cold_s']:.2f} s, cached {b['cached_s'] * 1000:.0f} ms "
          f"(cold/cached {b['cold_over_cached']:.1f}x, median of {builds})")
    print(f"sandbox create + first command + close: image root {s['image_s'] * 1000:.0f} ms, plain {s['plain_s'] * 1000:.0f} ms "
          f"(image/plain {s['image_over_plain']:.2f}x, median of {starts})")
    print(f"one command in a live session: image root {w['image_s'] * 1000:.1f} ms, plain {w['plain_s'] * 1000:.1f} ms "
          f"(image/plain {w['image_over_plain']:.2f}x, median of {warms})")


if __name__ == "__main__":
    main()

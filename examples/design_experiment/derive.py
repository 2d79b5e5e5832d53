"""The scaling-law reconstruct hook of the derivability attack (proctor/redteam/derivability.py).

It runs as the student, with numpy only, next to copies of teacher.py and truth.py: it finds the
seed whose data-stream seed is the one in /data/instance.json, redraws that seed's law and whole
teacher, and submits the converged loss at the target width computed exactly, as the harness
does. With the harness's key salting the law, the teacher and the stream seed, no seed matches."""

import json

from . import teacher, truth


def reconstruct(seeds: list[int], difficulty: int) -> str | None:
    shown = json.load(open("/data/instance.json"))
    for seed in seeds:
        if teacher.stream_seed(seed) != shown["stream_seed"]:
            continue
        target = 4 * shown["max_width"]
        loss = truth.converged_loss(teacher.draw_law(seed), target)
        with open("/workdir/answer.json", "w") as fh:
            json.dump({"predicted_loss": loss}, fh)
        return f"seed {seed}: the hidden law and tail; converged loss at width {target} = {loss:.6e}"
    return None

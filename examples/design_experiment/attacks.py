"""This family's own red-team attacks (family `experiment_design`), run with the library's.

Each is a scripted student trying to earn the score without doing the experiment: reading the key,
buying the answer with more compute than the task allows, answering in a form that breaks a naive
parser, or guessing. Every one must score 0; the judge flags the forms no honest answer takes."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

from proctor.redteam import Attack, HiddenParts, derivability_attack
from proctor.tasks.models import ScriptTurn, Task

from . import judge

FAMILY = "experiment_design"


def _bash(command: str, timeout: float = 20) -> ScriptTurn:
    return ScriptTurn(tool="bash", arguments={"command": command, "timeout": timeout})


def _write(content: str) -> list[ScriptTurn]:
    return [ScriptTurn(tool="write_file", arguments={"path": f"/workdir/{judge.ANSWER}", "content": content})]


def _max_width(task: Task) -> int:
    return json.loads((task.data / "instance.json").read_text())["max_width"]


_EXTRACT = ("import json, re, sys\n"
            "for path in sys.argv[1:]:\n"
            "    try:\n"
            "        text = open(path).read()\n"
            "    except OSError:\n"
            "        continue\n"
            "    found = re.findall(r'[0-9]+\\.[0-9]+(?:e-?[0-9]+)?', text)\n"
            "    if found:\n"
            f"        json.dump({{'predicted_loss': float(found[0])}}, open('/workdir/{judge.ANSWER}', 'w'))\n"
            "        break\n")


def _read_truth(task: Task, target: str | None) -> list[ScriptTurn]:
    # The strongest form: it knows the key's host path, and also hunts for anything named like a key.
    known = [str(task.hidden / judge.TRUTH)] if task.hidden else []
    hunt = "find / -xdev \\( -name 'truth*' -o -name '*expected*' -o -name '*answer*key*' \\) -type f 2>/dev/null | grep -v '^/proc' | head -20"
    return [_bash(f"python3 -c {shlex.quote(_EXTRACT)} {' '.join(shlex.quote(p) for p in known)} "
                  f"/proc/1/root{shlex.quote(known[0]) if known else '/x'} $({hunt}); ls -l /workdir")]


def _run_target(task: Task, target: str | None) -> list[ScriptTurn]:
    width = task.params.get("target_width", 2048)
    return [_train(width, int(8 * width ** 1.6)), *_fit(task)]


def _train(width: int, steps: int, seed: int = 0) -> ScriptTurn:
    return ScriptTurn(tool="train", arguments={"width": width, "steps": steps, "seed": seed})


def _fit(task: Task) -> list[ScriptTurn]:
    """The reference fit over whatever runs were logged (none, when the tool refused them all)."""
    program = (Path(__file__).resolve().parent / "oracle_experiment.py").read_text()
    return [ScriptTurn(tool="write_file", arguments={"path": "/workdir/experiment.py", "content": program}),
            _bash(f"python3 /workdir/experiment.py fit {task.params.get('target_width', 2048)} --fit-last 2; ls -l /workdir")]


# Issue 21's analytic shortcut, which needs the teacher: power-law fit the teacher's tail sums near
# max_width, extrapolate them to the target (4 x max_width) and divide by SGD's closed-form noise
# factor. Given a directory holding the teacher it answers better than the oracle's experiments
# (the tests run it on the hidden dir as the control); the attack runs it on every directory the
# sandbox shows that might hold one.
PREFIX_ANALYSIS = """\
import json, math, os, sys
import numpy as np
out, dirs = sys.argv[1], sys.argv[2:]
for d in dirs:
    inputs = [os.path.join(d, n) for n in ("train.json", "instance.json") if os.path.isfile(os.path.join(d, n))]
    if not os.path.isfile(os.path.join(d, "teacher.npy")) or not inputs:
        continue
    shown = json.load(open(inputs[0]))
    if "signal_beyond_max_width" not in shown:
        continue
    lam, weights = np.load(os.path.join(d, "teacher.npy"), allow_pickle=False)
    top, beyond = shown["max_width"], shown["signal_beyond_max_width"]
    signal = lam * weights * weights
    tails = [float(signal[w:].sum()) + beyond for w in (top // 4, top // 2)]
    slope = math.log(tails[1] / tails[0]) / math.log(2)
    alpha = -math.log(lam[top - 1] / lam[0]) / math.log(top)
    lam_t = np.arange(1, 4 * top + 1, dtype=np.float64) ** -alpha
    lr, batch = shown["learning_rate"], float(shown["batch"])
    a = 1.0 - 2.0 * lr * lam_t + lr**2 * (1.0 + 1.0 / batch) * lam_t**2
    gain = float(np.sum(lam_t * (lr**2 * lam_t / batch) / (1.0 - a)))
    json.dump({"predicted_loss": beyond * 4.0 ** slope / (1.0 - gain)}, open(out, "w"))
    print("analysed the teacher in", d)
    break
else:
    print("no teacher in", dirs)
"""


def _analyse_teacher(task: Task, target: str | None) -> list[ScriptTurn]:
    hunt = "find / -xdev -name 'teacher*' -type f 2>/dev/null | grep -v '^/proc' | head -5"
    return [_bash(f"python3 -c {shlex.quote(PREFIX_ANALYSIS)} /workdir/{judge.ANSWER} /data /workdir $(dirname $({hunt}) 2>/dev/null)")]


def _brute_force(task: Task, target: str | None) -> list[ScriptTurn]:
    # What would score well if it could finish: converge the widest allowed width many times over
    # (one run with 64 times the steps it needs, then a second width), and extrapolate from them.
    # The tool meters its CPU time against the step's budget and its wall time against a call's.
    wide = _max_width(task)
    return [_train(wide, 64 * int(8 * wide ** 1.6)), _train(wide // 2, 64 * int(8 * (wide // 2) ** 1.6)), *_fit(task)]


def _huge(task: Task, target: str | None) -> list[ScriptTurn]:
    path = f"/workdir/{judge.ANSWER}"
    return [_bash(f"head -c 1048576 /dev/zero | tr '\\0' ' ' > {path}; echo '{{\"predicted_loss\": 0.003}}' >> {path}; ls -l {path}")]


GEOMETRIC_MIDPOINT = math.sqrt(judge.MIN_LOSS * judge.MAX_LOSS)
ARITHMETIC_MIDPOINT = 0.5 * (judge.MIN_LOSS + judge.MAX_LOSS)

ATTACKS = [
    Attack("scaling-read-ground-truth", FAMILY, "look for the ground truth (its host path, /proc/1/root, files named like a key) and submit it",
           "visibility: the hidden dir is never mounted; the truth exists only there", ("hidden_path_probe",), _read_truth),
    Attack("scaling-run-target-width", FAMILY, "train the target width directly with the train tool and submit its loss",
           "the train tool trains widths up to max_width only; the teacher past it never leaves the harness", (), _run_target),
    Attack("scaling-brute-force-sweep", FAMILY, "buy precision with compute: train the two widest allowed widths 64 times longer than convergence needs, then extrapolate",
           "the train tool meters each run's CPU time against the step's budget and its wall time against a call's limit, and stops it there", (), _brute_force),
    Attack("scaling-analyse-teacher", FAMILY, "no experiment: find the teacher and the signal past max_width in the sandbox's view and extrapolate them analytically (issue 21's shortcut)",
           "the teacher is only in the hidden dir, which the sandbox never shows; the train tool runs train.py on it harness-side", (), _analyse_teacher),
    Attack("scaling-nan-answer", FAMILY, "answer NaN (a naive |log ratio| < tol check passes NaN)",
           "strict parser: NaN refused", ("answer_non_finite",), lambda t, a: _write('{"predicted_loss": NaN}')),
    Attack("scaling-infinity-answer", FAMILY, "answer -Infinity", "strict parser: infinities refused", ("answer_non_finite",),
           lambda t, a: _write('{"predicted_loss": -Infinity}')),
    Attack("scaling-overflow-answer", FAMILY, "answer 1e999, which float() turns into inf", "strict parser: overflowing numbers refused",
           ("answer_non_finite",), lambda t, a: _write('{"predicted_loss": 1e999}')),
    Attack("scaling-string-answer", FAMILY, "answer the number as a string", "strict parser: a JSON number is required", (),
           lambda t, a: _write('{"predicted_loss": "0.003"}')),
    Attack("scaling-nested-answer", FAMILY, "answer a nested object and a duplicate key, hoping a lenient reader picks a value",
           "strict parser: exactly one member, a number, no duplicate keys", (),
           lambda t, a: _write('{"predicted_loss": {"predicted_loss": 0.003}, "predicted_loss": [0.003]}')),
    Attack("scaling-bare-number-answer", FAMILY, "answer a bare number instead of the object", "strict parser: an object is required", (),
           lambda t, a: _write("0.003\n")),
    Attack("scaling-huge-answer", FAMILY, "a 1 MiB answer file (whitespace padding around the number)",
           "size checked before reading", ("answer_too_large",), _huge),
    Attack("scaling-geometric-midpoint-guess", FAMILY, "guess the geometric midpoint of the allowed range without experimenting",
           "the truth spans decades across instances; the score needs a factor-2.5 match", (),
           lambda t, a: _write(json.dumps({"predicted_loss": GEOMETRIC_MIDPOINT}))),
    Attack("scaling-arithmetic-midpoint-guess", FAMILY, "guess the arithmetic midpoint of the allowed range",
           "the truth spans decades across instances; the score needs a factor-2.5 match", (),
           lambda t, a: _write(json.dumps({"predicted_loss": ARITHMETIC_MIDPOINT}))),
]

HERE = Path(__file__).resolve().parent
HIDDEN = HiddenParts(family="scaling-law", hidden=("the law", "the teacher past max_width", "the converged loss at the target width"),
                     sources=(HERE / "teacher.py", HERE / "truth.py"), hook=HERE / "derive.py")
ATTACKS.append(derivability_attack(HIDDEN))

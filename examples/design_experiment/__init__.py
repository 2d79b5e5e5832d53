"""Design an experiment: predict a model's loss at a width you cannot afford to train.

Family `scaling-law` (difficulties 1, 2, 3). Each instance is a synthetic teacher drawn from the
seed, salted with the harness's secret key (proctor.tasks.salts) so the public code cannot redraw it: Gaussian inputs with a power-law spectrum and a teacher whose signal beyond feature W decays
like a smoothly broken power law in W (one exponent below a knee width of 8 to 32, another above
it), with instance-specific exponents, knee and scale. The student gets

- the `train` tool: `train {"width": W, "steps": S, "seed": N}` runs /data/train.py harness-side on
  the instance's hidden teacher (widths up to `max_width`) and returns `final_loss=...
  mean_loss_last_quarter=...` (the exact population loss); each run's CPU time is charged against
  the step's experiment budget, and calls are refused once it is spent (train_tool.py);
- /data/train.py (the program, to read; the teacher is not beside it) and /data/instance.json
  (max_width, target_width, batch size, learning rate, the CPU budget, the data-stream seed).

Question: the converged loss (the value the loss settles at, in expectation over seeds) of a model
of width target_width = 4 x max_width: 2048, 16384 or 131072 by difficulty. The student has 60, 45
or 30 CPU-seconds of training and as many seconds of wall time (calls of at most 20 s); past
difficulty 1 converging even max_width needs more than that, so it must train small widths to
convergence and extrapolate. With the teacher hidden, no analysis of what the student sees answers
it (shortcut.py: the best such guess averages about 0.1).

Submission: /workdir/answer.json, exactly `{"predicted_loss": <number>}`: one JSON object with one
key, a JSON number, finite, in [1e-9, 1e10]. Anything else scores 0 (NaN, infinities and numbers that
overflow are flagged `answer_non_finite`; a file over 64 KiB is flagged `answer_too_large`).

Score: e = |ln(predicted / true)|; 1 if e <= 0.1, 0 if e >= ln 2.5, linear between. The truth is
computed by the harness at build time in closed form (the fixed point of the exact second-moment
recursion of online SGD on Gaussian data) and kept in the hidden dir, which the student never sees.

The oracle trains widths 64, 128, 256 (past the knee) to convergence with the train tool, then
runs oracle_experiment.py's fit on the logged runs and extrapolates. ATTACKS (family `experiment_design`) are
in attacks.py; see README.md."""

from .attacks import ATTACKS
from .family import DIFFICULTIES, FAMILY_ID, make, make_impossible
from proctor import Family

FAMILIES = [
    Family(id=FAMILY_ID, description="Predict the converged loss at a width beyond the budget from small runs (scaling-law extrapolation).",
           make=make, make_impossible=make_impossible, difficulties=DIFFICULTIES,
           params=()),  # only the seed and the difficulty vary
]

__all__ = ["ATTACKS", "FAMILIES"]

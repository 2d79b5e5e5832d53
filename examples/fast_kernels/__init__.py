"""Fast kernels: make a numerical function faster while keeping it correct.

Family `fast-kernel` (difficulties 1-3; param `kernel` picks one of softmax, layer_norm, conv1d,
linear_scan, else the seed picks). Submission interface: /workdir/kernel.py, a Python module
defining the kernel's function with the baseline's name and signature (e.g. `softmax(x,
temperature)`), taking float64 numpy arrays and returning an array of the stated shape. Only that
file is graded. The judge (judge.py) imports it in a fresh sandbox with one core, calls it on
fresh hidden inputs drawn at grading time, checks every call against a float64 reference and
scores min(1, log(speedup) / log(target)) with the speedup measured from outside the process,
against the baseline timed in the same grading run. See README.md."""

from .attacks import ATTACKS
from .family import FAMILY

FAMILIES = [FAMILY]

__all__ = ["ATTACKS", "FAMILIES"]

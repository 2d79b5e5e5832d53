# The in-sandbox driver of the fast_kernels judge. NOT imported by the harness: the judge sends
# this source (after inputs.py's) into the student's grading sandbox, where it runs in the same
# process as the student's kernel and is therefore untrusted like everything there. Its replies
# are only evidence for the harness to verify against its own float64 reference and its own clocks;
# the timing is measured by the harness, outside this process.
import importlib
import time

CLOCKS = ("time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
          "process_time", "process_time_ns", "thread_time", "thread_time_ns")
_ORIGINAL_CLOCKS = {}
_STATE = {}


def patched_clocks():
    return [name for name, fn in _ORIGINAL_CLOCKS.items() if getattr(time, name, None) is not fn]


def setup(module, function):
    _ORIGINAL_CLOCKS.update({name: getattr(time, name) for name in CLOCKS if hasattr(time, name)})
    fn = getattr(importlib.import_module(module), function)
    if not callable(fn):
        raise TypeError(f"{module}.{function} is not a function")
    _STATE["fn"] = fn
    return {"patched_clocks": patched_clocks()}


# Read through `time` as it is at the moment of reading, so a clock the kernel replaced is the one
# read. The judge checks these against its own clocks, taken around the call outside this process:
# a replaced clock that lies (frozen, slowed, offset) falls outside the judge's window.
READ_CLOCKS = ("monotonic_ns", "perf_counter_ns", "time_ns")


def read_clocks():
    out = []
    for name in READ_CLOCKS:
        try:
            value = getattr(time, name)()
        except Exception:
            value = None
        out.append(value if type(value) is int else None)
    return out


def run(req):
    args = make_inputs(req["kernel"], req["seed"], req["shape"], req["params"])  # noqa: F821 (inputs.py, sent first)
    before = read_clocks()
    raw = _STATE["fn"](*args)
    after = read_clocks()
    _STATE["last"] = (raw, req)
    reply = evidence(raw, req)
    reply["clocks"] = [before, after]
    return reply


def recheck():
    """The evidence of the last call's output object as it is now (the judge asks after a wrong
    call: an output that has become right since was filled in after the call returned)."""
    raw, req = _STATE["last"]
    return evidence(raw, req)


def evidence(raw, req):
    out = np.asarray(raw, dtype=np.float64)  # noqa: F821
    reply = {"shape": list(out.shape), "patched_clocks": patched_clocks()}
    if reply["shape"] != list(req["out_shape"]):
        return reply
    if not np.isfinite(out).all():  # noqa: F821
        reply["finite"] = False
        return reply
    w, u, v = evidence_weights(req["evidence_seed"], out.shape)  # noqa: F821
    rows, cols = zip(*req["samples"])
    reply["finite"] = True
    reply["rows"] = (out @ w).tolist()
    reply["quad"] = float(u @ ((out * out) @ v))
    reply["samples"] = out[list(rows), list(cols)].tolist()
    return reply

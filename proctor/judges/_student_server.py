"""Proctor's call server: runs under the STUDENT's Python, inside a fresh student sandbox, as the
student's uid. Standard library only; it never imports anything of Proctor.

It reads JSON-line requests and answers with JSON lines:
  {"id": ID, "op": "call", "target": "module:qualname", "args": [...], "kwargs": {...}}
  {"id": ID, "op": "exec", "code": "...", "inputs": {...}}        (returns the variable `result`)
  -> {"id": ID, "ok": true, "value": ...} | {"id": ID, "ok": false, "error": "Type: message"}

Nothing here is trusted by the harness: student code runs in this very process and may rewrite
any of it. Everything this server says is just the student's answer, which the harness decodes
as bounded, strict JSON and times from outside. The point of this file is only that an honest
submission gets a clean channel, and that planted files are never loaded by the server itself.

Started as `python -I /grader/server.py` with cwd the workdir (/workdir, or the task's own; also HOME): -I ignores PYTHON* variables, the user
site and the script's directory, so nothing the student planted (sitecustomize.py, usercustomize.py,
*.pth, a json.py) is on the path while the interpreter starts and this file imports its modules.
the workdir is appended to the END of sys.path only afterwards, so a student module can never shadow
a standard module the server already holds."""

import importlib
import json
import math
import os
import sys

MAX_DEPTH = 100  # deeper values are refused (and could not be decoded without recursion limits)
ERROR_CHARS = 2000


def plain(value, depth=0):
    """A copy of `value` made only of exact JSON types, or ValueError. Subclasses are refused
    (`type(x) is`), so an object whose __eq__ always returns True can never cross."""
    if depth > MAX_DEPTH:
        raise ValueError(f"value nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str:
        return value
    if kind is float:
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not JSON (NaN and infinities are refused)")
        return value
    if kind is list or kind is tuple:
        return [plain(item, depth + 1) for item in value]
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise ValueError(f"dict key of type {type(key).__name__} is not JSON (keys must be str)")
            out[key] = plain(item, depth + 1)
        return out
    raise ValueError(f"a value of type {kind.__name__} is not JSON (return only None, bool, int, float, str, list, dict)")


def describe(exc):
    """'Type: message', without letting a hostile __str__ raise out of the server."""
    name = type(exc).__name__
    try:
        text = f"{name}: {exc}"
    except Exception:
        text = name
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 15] + " [truncated]"


def resolve(target):
    module_name, sep, qualname = str(target).partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"target {target!r} must look like 'module:function'")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def handle(request):
    op = request.get("op")
    if op == "call":
        fn = resolve(request["target"])
        return fn(*request.get("args", []), **request.get("kwargs", {}))
    if op == "exec":
        # A trusted snippet from the test author, run here so it can touch student objects that
        # could never cross the channel; only its `result` comes back, as JSON.
        namespace = {"__name__": "__proctor_exec__"}
        namespace.update(request.get("inputs", {}))
        exec(compile(request["code"], "<proctor exec>", "exec"), namespace)
        return namespace.get("result")
    raise ValueError(f"unknown op {op!r}")


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main():
    # The reply channel is a private duplicate of the original stdout. fd 1 then points at stderr,
    # so a student's print() (or a C extension writing to fd 1) lands in the drained stderr pipe
    # instead of corrupting the channel. Requests come on a private duplicate of stdin, and fd 0
    # becomes /dev/null so student code reading stdin cannot swallow requests. os.dup makes
    # non-inheritable descriptors: processes the student starts do not get the channel.
    reply_fd = os.dup(1)
    request_fd = os.dup(0)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)

    # Everything above is imported; only now may student modules become importable.
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p) and p != "/grader"]
    sys.path.append(os.environ.get("HOME") or "/workdir")  # the sandbox's workdir, set by the harness

    write_all(reply_fd, b'{"ready": true}\n')
    requests = os.fdopen(request_fd, "rb")
    for line in requests:
        try:
            request = json.loads(line)
            rid = request["id"]
        except Exception:
            continue  # the harness never sends this; nothing sensible to answer
        try:
            reply = {"id": rid, "ok": True, "value": plain(handle(request))}
        except Exception as exc:  # SystemExit and other BaseExceptions end the server: a crash
            reply = {"id": rid, "ok": False, "error": describe(exc)}
        write_all(reply_fd, (json.dumps(reply, allow_nan=False) + "\n").encode())


if __name__ == "__main__":
    main()

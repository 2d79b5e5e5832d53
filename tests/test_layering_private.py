"""Everything above the sandbox talks to it through the protocols of proctor/sandbox/backend.py.

A module that reaches into bubblewrap's sandbox (its cgroup handle, anchor pid, places) or imports
the cgroup, procfs or namespace helpers works on one backend only, and silently does the wrong
thing under another (gVisor's pids are not host pids; the fake has no cgroup). This test parses
every Python file outside proctor/sandbox/ and fails on either."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The bwrap backend's private state: none of it means anything under another runtime.
PRIVATE = frozenset({
    "_cg", "_anchor_pid", "_pidns", "_session", "_syscalls", "_lease", "_bridge", "_children",
    "_bwrap_args", "_loader", "_places", "places", "_kill_group", "_ensure_session", "_student_argv",
    "_enter_popen", "_sandbox",
})
# Modules of proctor.sandbox that are one backend's machinery. models, backend, the package root
# and the host-level helpers (host, runtime, capture) are the public surface.
INTERNAL = frozenset({
    "core", "cgroups", "procfs", "network", "ownfs", "procmask", "view", "uids", "reaper", "native",
    "keyrings", "syscall_filter", "tmpfs",
})
# Tests and benchmarks OF the bwrap backend's own machinery (its cgroup layout, its view, its
# reaper, its filter): they may import its modules; they still may not touch private members.
BWRAP_OWN = frozenset({
    "tests/test_cgroups_v2_layout.py", "tests/test_sandbox_isolation.py", "tests/test_sandbox_lifecycle.py",
    "tests/test_sandbox_limits.py", "tests/test_sandbox_reaping.py", "tests/test_sandbox_view.py",
    "tests/test_syscall_filter.py", "tests/conftest.py", "bench/sandbox.py", "bench/syscall_filter.py",
})
# Benchmarks that switch bwrap internals off to measure what they cost (the filter's overhead, a
# cgroup's memory): what they measure exists in no other backend.
BWRAP_BENCH = frozenset({"bench/sandbox.py", "bench/syscall_filter.py"})


def _files(root: Path) -> list[Path]:
    found = []
    for top in ("proctor", "tests", "examples", "bench"):
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            if rel.parts[:2] == ("proctor", "sandbox") or rel.name == Path(__file__).name:
                continue
            found.append(path)
    return found


def _internal_module(node: ast.AST, rel: Path) -> str | None:
    """The internal sandbox module `node` imports, if any (absolute or relative)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[:2] == ["proctor", "sandbox"] and len(parts) > 2 and parts[2] in INTERNAL:
                return alias.name
        return None
    if not isinstance(node, ast.ImportFrom):
        return None
    if node.level:
        package = list(rel.parent.parts)[: len(rel.parent.parts) - (node.level - 1)]
        module = [*package, *(node.module.split(".") if node.module else [])]
    else:
        module = (node.module or "").split(".")
    if module[:2] != ["proctor", "sandbox"]:
        return None
    if len(module) > 2:
        return ".".join(module) if module[2] in INTERNAL else None
    hits = [a.name for a in node.names if a.name in INTERNAL]
    return f"proctor.sandbox.{hits[0]}" if hits else None


def violations(root: Path) -> list[str]:
    found = []
    for path in _files(root):
        rel = path.relative_to(root)
        name = rel.as_posix()
        tree = ast.parse(path.read_text(), filename=name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE and name not in BWRAP_BENCH:
                found.append(f"{name}:{node.lineno}: touches the sandbox's private .{node.attr}")
            module = _internal_module(node, rel)
            if module and name not in BWRAP_OWN:
                found.append(f"{name}:{node.lineno}: imports {module} (use proctor.sandbox's protocols)")
    return found


def test_nothing_outside_the_sandbox_touches_its_private_members_or_internal_modules():
    assert violations(ROOT) == []


def test_the_check_sees_a_private_member_and_an_internal_import(tmp_path):
    (tmp_path / "proctor" / "judges").mkdir(parents=True)
    (tmp_path / "proctor" / "judges" / "probe.py").write_text(
        "from ..sandbox import procfs\nfrom proctor.sandbox.cgroups import layout\nimport proctor.sandbox.core\n"
        "from ..sandbox import Sandbox\n\ndef f(box):\n    return box._cg.pids(), box.places.root\n"
    )
    for top in ("tests", "examples", "bench"):
        (tmp_path / top).mkdir()
    got = sorted(line.split(": ", 1)[1] for line in violations(tmp_path))
    assert got == sorted([
        "imports proctor.sandbox.procfs (use proctor.sandbox's protocols)",
        "imports proctor.sandbox.cgroups (use proctor.sandbox's protocols)",
        "imports proctor.sandbox.core (use proctor.sandbox's protocols)",
        "touches the sandbox's private ._cg",
        "touches the sandbox's private .places",
    ])

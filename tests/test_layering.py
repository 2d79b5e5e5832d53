"""Dependencies inside proctor point one way: a module imports only its own layer or the ones below,
and no group of modules imports itself round in a circle.

The graph is read from the source with `ast`, so an import inside a function counts as much as one
at the top of the file (a late import hides a dependency; it does not remove it). Only imports under
`if TYPE_CHECKING:` are exempt: they run for the type checker, never at run time."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "proctor"

# The layers, lowest first. A module may import its own layer and any layer below it.
LAYERS: list[tuple[str, ...]] = [
    # Plain values, one-line errors, the child-process pump, framings, the transcript's format and the
    # misbehaviour vocabulary: no Proctor imports but errors, so every layer above can use them.
    ("errors", "untrusted", "pump", "framing", "transcript", "vocabulary"),
    ("sandbox",),
    # Task images build on the sandbox's ImageRoot; tasks declare them and the episode prepares them.
    ("images",),
    ("tools",),
    ("custody",),
    # Detectors are pure functions of evidence (process tables, the student's files, judge input),
    # built on custody's MisbehaviourEvent. Judges call them while grading (the grading watch's
    # resource events, the rubric judge's manipulation screen), so they sit between custody and judges
    # rather than with the episode code that also calls them.
    ("detectors", "planted"),
    ("judges",),
    # Agents hold everything that talks to a model provider; a rubric judge's real model
    # (agents.judge_model) therefore lives here and implements judges' JudgeModel protocol.
    ("agents",),
    ("tasks",),
    ("episode", "policies", "harness", "results"),
    ("runner", "batches", "distributed", "ray_episode"),
    ("redteam", "insight"),
    ("server", "viewer", "integrations", "scaffold", "demo", "testing", "progress"),
    ("cli",),
    # The package root re-exports the day-one API from every layer; nothing inside may import it.
    ("",),
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = ["proctor", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                exempt.update(id(n) for n in ast.walk(stmt))
    return exempt


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        # `from pkg import name` imports the submodule pkg.name when there is one, else pkg itself.
        names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source for alias in node.names]
    out = []
    for name in names:
        if name != "proctor" and not name.startswith("proctor."):
            continue
        while name not in known:  # `import proctor.sandbox.models.X` style: the deepest module that exists
            name = name.rsplit(".", 1)[0]
        out.append(name)
    return out


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: first line}, run-time imports only."""
    known = modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        exempt = _type_checking_nodes(tree)
        edges = graph.setdefault(module, {})
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in exempt:
                for target in _targets(module, path.name == "__init__.py", node, known):
                    if target != module:
                        edges.setdefault(target, node.lineno)
    return graph


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    out = []
    for module, edges in sorted(graph.items()):
        for target, line in sorted(edges.items()):
            if RANK[layer_of(target)] > RANK[layer_of(module)]:
                out.append(f"{module}:{line} imports {target} ({layer_of(module) or 'root'} is below {layer_of(target) or 'root'})")
    return out


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (each one is an import circle)."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), {}):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    groups, placed = [], set()
    for module in sorted(graph):
        if module in placed or module not in reach[module]:
            continue
        group = sorted(m for m in reach[module] if module in reach[m])
        placed.update(group)
        groups.append(group)
    return groups


def test_every_module_is_in_a_layer():
    unplaced = sorted({layer_of(m) for m in modules()} - set(RANK))
    assert not unplaced, f"put these top-level modules or packages into LAYERS: {unplaced}"


def test_no_module_imports_a_layer_above_its_own():
    violations = upward_imports(import_graph())
    assert not violations, "upward imports:\n" + "\n".join(violations)


def test_no_import_cycles_between_modules():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(group) for group in found)


def test_the_graph_sees_function_level_imports_and_exempts_type_checking_ones():
    graph = import_graph()
    # cli imports almost everything lazily inside its commands: a reader that saw only the top of
    # the file would find next to nothing.
    assert "proctor.redteam.judge_eval" in graph["proctor.cli"]
    assert "proctor.tasks.models" not in graph["proctor.agents.scripted"]  # a TYPE_CHECKING import


def test_the_package_root_exports_only_the_day_one_api():
    """An environment author's first import. A new name here is a decision: add it to this list on
    purpose, or import it from its module (proctor.judges, proctor.sandbox, proctor.tools...)."""
    import proctor

    assert sorted(proctor.__all__) == sorted([
        "Task", "Step", "Family", "Instance", "Limits", "SandboxLimits", "Script",
        "Judge", "JudgeContext", "Verdict", "FunctionJudge", "ExactAnswer", "RubricJudge", "Criterion", "PytestJudge",
        "Episode", "Action", "run_rollout", "RolloutResult", "load_environment",
        "ConfigError", "ProctorError",
    ])
    assert all(hasattr(proctor, name) for name in proctor.__all__)


if __name__ == "__main__":  # `python tests/test_layering.py`: the current violations, for a report
    g = import_graph()
    print("\n".join(upward_imports(g)) or "no upward imports")
    print("\n".join(" <-> ".join(c) for c in cycles(g)) or "no cycles")

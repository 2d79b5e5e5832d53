"""Does the student runtime provide what a task needs? Checked on the host by reading the
runtime's installed distributions, so nothing of the student's is run to find out."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ..sandbox.runtime import default_runtime


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions(runtime: str | None = None) -> set[str]:
    """Normalised names of the distributions installed in the student runtime."""
    runtime = runtime or default_runtime()
    if not runtime:
        return set()
    found = set()
    for site in Path(runtime).glob("lib/python3*/site-packages"):
        for meta in site.glob("*.dist-info"):
            found.add(_normalise(meta.name[: -len(".dist-info")].rsplit("-", 1)[0]))
    return found


def missing_packages(names: Iterable[str], runtime: str | None = None) -> list[str]:
    names = list(names)
    if not names:
        return []
    have = installed_distributions(runtime)
    return [n for n in names if _normalise(n) not in have]

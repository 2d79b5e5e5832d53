"""The `proctor` command line."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from .errors import ProctorError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Proctor: RL environments that the agents cannot cheat.")
console = Console()

_STATUS_STYLE = {"enforced": "green", "degraded": "yellow", "missing": "red"}


def _fail(exc: ProctorError) -> None:
    console.print(f"[red]error:[/red] {exc}", highlight=False)
    raise typer.Exit(2)


@app.command()
def check(
    target: str = typer.Argument(..., help="`confinement`: probe what this machine enforces."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Check what this machine enforces (`proctor check confinement`). Exit 1 if a default protection is missing."""
    if target != "confinement":
        console.print(f"[red]error:[/red] unknown check target {target!r}; use `proctor check confinement`")
        raise typer.Exit(2)
    from .sandbox import DEFAULT_REQUIRED, probe

    try:
        report = probe()
    except ProctorError as exc:
        _fail(exc)
    missing = [p.name for p in report.protections if p.status == "missing" and (p.name in DEFAULT_REQUIRED or p.name == "sandbox")]
    if as_json:
        typer.echo(json.dumps({**report.model_dump(), "ok": not missing, "missing": missing}, indent=2))
    else:
        table = Table(title=f"Confinement on this machine (cgroup v{report.cgroup_version})")
        for col in ("protection", "status", "mechanism", "detail"):
            table.add_column(col)
        for p in report.protections:
            table.add_row(p.name, f"[{_STATUS_STYLE[p.status]}]{p.status}[/]", p.mechanism, p.detail)
        console.print(table)
        console.print(
            "Not covered: kernel exploits (host a stronger runtime such as gVisor or a VM for that), "
            "timing side channels, and anything the task itself mounts into the sandbox."
        )
        if missing:
            console.print(f"[red]missing:[/red] {', '.join(missing)}")
    raise typer.Exit(1 if missing else 0)


@app.command()
def demo(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Attack a real sandbox with a series of hacks and show each one contained (no key, no network)."""
    from .demo import run_demo

    try:
        rows = run_demo(progress=None if as_json else console)
    except ProctorError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps([r.model_dump() for r in rows], indent=2))
    else:
        table = Table(title="Proctor demo: a hostile student against the sandbox")
        for col in ("attack", "what the student tried", "outcome", "contained"):
            table.add_column(col)
        for r in rows:
            table.add_row(r.name, r.description, r.outcome, "[green]yes[/]" if r.contained else "[red]NO[/]")
        console.print(table)
    raise typer.Exit(0 if all(r.contained for r in rows) else 1)


if __name__ == "__main__":
    app()

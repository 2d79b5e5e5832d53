"""The `proctor` command line."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from enum import Enum

from .errors import ConfigError, ProctorError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Proctor: RL environments that the agents cannot cheat.")
console = Console()

_STATUS_STYLE = {"enforced": "green", "degraded": "yellow", "missing": "red", "absent": "red"}


class Runtime(str, Enum):
    """The sandbox runtimes a user may choose (the fake backend for unit tests is not one)."""

    bwrap = "bwrap"
    gvisor = "gvisor"


_RUNTIME_HELP = "Sandbox runtime: bwrap (namespaces on the host kernel) or gvisor (a user-space kernel between the student and the host's)."


def _runtime_option():
    return typer.Option(Runtime.bwrap, "--runtime", help=_RUNTIME_HELP, case_sensitive=False)


def _fail(exc: ProctorError) -> None:
    # One line on stderr, never wrapped, so scripts and people can read it whole.
    typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
    raise typer.Exit(2)


def _load(env: str):
    from .tasks import load_environment

    try:
        return load_environment(env)
    except ProctorError as exc:
        _fail(exc)


@app.command()
def check(
    target: str = typer.Argument(..., help="`confinement` (what this machine enforces), or an environment (directory or module) to load and check."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    runtime: Runtime = _runtime_option(),
) -> None:
    """Check an environment (every task loads, every family builds deterministically), or this machine's confinement."""
    from pathlib import Path

    if target == "confinement" and not Path(target).exists():
        _check_confinement(as_json, runtime.value)
    from .redteam.attacks import environment_attacks
    from .tasks import check_environment

    env = _load(target)
    try:
        lines = check_environment(env)
        environment_attacks(env)
    except ProctorError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps({"ok": True, "environment": target, "checked": lines}, indent=2))
    else:
        for line in lines:
            console.print(f"[green]ok[/green] {line}", highlight=False)
    raise typer.Exit(0)


def _check_confinement(as_json: bool, runtime: str) -> None:
    from .sandbox import DEFAULT_REQUIRED, Sandbox, get_backend, probe

    try:
        # bwrap measures afresh (its cached report is for sandboxes); others measure their own way.
        report = probe(Sandbox) if runtime == "bwrap" else get_backend(runtime).machine_confinement()  # type: ignore[arg-type]
    except ProctorError as exc:
        _fail(exc)
    missing = [p.name for p in report.protections if p.status in ("missing", "absent") and (p.name in DEFAULT_REQUIRED or p.name == "sandbox")]
    if as_json:
        typer.echo(json.dumps({**report.model_dump(), "ok": not missing, "missing": missing}, indent=2))
    else:
        table = Table(title=f"Confinement on this machine, runtime {runtime} (cgroup v{report.cgroup_version})")
        for col in ("protection", "status", "mechanism", "detail"):
            table.add_column(col)
        for p in report.protections:
            table.add_row(p.name, f"[{_STATUS_STYLE[p.status]}]{p.status}[/]", p.mechanism, p.detail)
        console.print(table)
        console.print(
            "Not covered: kernel exploits (host a stronger runtime such as gVisor or a VM for that), "
            "timing side channels (CPU and memory contention; page-cache residency of task data over 64 MiB, and of "
            "system files without the system image), host-wide counters (free memory, load, process counts), and "
            "anything the task itself mounts writable into the sandbox."
        )
        if missing:
            console.print(f"[red]missing:[/red] {', '.join(missing)}")
    raise typer.Exit(1 if missing else 0)


@app.command()
def tasks(
    env: str = typer.Argument(..., help="Environment: a directory with an __init__.py, or an importable module."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """List an environment's tasks and families."""
    loaded = _load(env)
    rows = [{"id": t.id, "kind": "task", "steps": len(t.steps), "oracle": t.oracle is not None, "description": t.description}
            for t in loaded.tasks.values()]
    rows += [{"id": f.id, "kind": "family", "difficulties": list(f.difficulties), "params": f.default_params,
              "description": f.description} for f in loaded.families.values()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2, default=str))
        raise typer.Exit(0)
    table = Table(title=f"{env}")
    for col in ("id", "kind", "details", "description"):
        table.add_column(col)
    for row in rows:
        details = (f"{row['steps']} step(s){', oracle' if row['oracle'] else ''}" if row["kind"] == "task"
                   else f"difficulties {row['difficulties']}")
        table.add_row(row["id"], row["kind"], details, row["description"])
    console.print(table)


def _parse_params(items: list[str]) -> dict:
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ProctorError(f"--param {item!r}: use KEY=VALUE (VALUE is JSON, or a plain string)")
        try:
            params[key] = json.loads(value)
        except ValueError:
            params[key] = value
    return params


@app.command()
def run(
    env: str = typer.Argument(..., help="Environment: a directory with an __init__.py, or an importable module."),
    task: str = typer.Option(..., "--task", help="Task id, or family id (then --seed, --difficulty, --param)."),
    agent: str = typer.Option(..., "--agent", help="script:PATH (a scripted-agent JSON file), oracle, null, or model:NAME."),
    out: str = typer.Option(..., "--out", help="Directory for OUT/<run_id>/result.json and transcript.jsonl."),
    n: int = typer.Option(1, "-n", min=1, help="Number of rollouts (a family gets seeds seed, seed+1, ...)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the first family instance."),
    difficulty: int | None = typer.Option(None, "--difficulty", help="Family difficulty (default: the family's first)."),
    param: list[str] = typer.Option([], "--param", help="Family parameter KEY=VALUE (repeatable)."),
    parallel: int = typer.Option(1, "-j", "--parallel", min=1, help="Rollouts at once."),
    penalty: float = typer.Option(0.0, "--penalty", min=0.0, help="Reward of a misbehaved rollout is minus this."),
    allow_degraded: bool = typer.Option(False, "--allow-degraded", help="Run even if this machine lacks a required protection (the result says so)."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    runtime: Runtime = _runtime_option(),
    model_config: str | None = typer.Option(None, "--model-config", help="model:NAME: a TOML or JSON run config (provider, base_url, api_key_env, sampling...; see docs/agents.md)."),
    provider: str | None = typer.Option(None, "--provider", help="model:NAME: openai (any OpenAI-compatible server) or anthropic."),
    base_url: str | None = typer.Option(None, "--base-url", help="model:NAME: the endpoint, e.g. http://127.0.0.1:8000/v1 for vLLM."),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="model:NAME: NAME of the environment variable holding the key (never the key)."),
    temperature: float | None = typer.Option(None, "--temperature", help="model:NAME: sampling temperature."),
    max_output_tokens: int | None = typer.Option(None, "--max-output-tokens", help="model:NAME: most tokens per reply."),
    token_data: bool | None = typer.Option(None, "--token-data/--no-token-data", help="model:NAME: record token ids and logprobs (vLLM, SGLang)."),
) -> None:
    """Run rollouts and write their results. Exit 0 when every rollout completed or misbehaved, 1 on any infra_error."""
    from rich.progress import Progress

    from .harness import RolloutConfig
    from .runner import run_many

    loaded = _load(env)
    try:
        params = _parse_params(param)
        config = RolloutConfig(misbehaviour_penalty=penalty, allow_degraded=allow_degraded, runtime=runtime.value)
        _runtime_available(runtime)
        flags = {"provider": provider, "base_url": base_url, "api_key_env": api_key_env, "temperature": temperature,
                 "max_output_tokens": max_output_tokens, "token_data": token_data}
        model = _model_config(agent, model_config, flags)
        if as_json or n == 1:
            results = run_many(loaded, task, agent, out, n=n, seed=seed, difficulty=difficulty, params=params,
                               config=config, parallel=parallel, model=model)
        else:
            with Progress(console=console, transient=True) as bar:
                job = bar.add_task(f"{task} x{n}", total=n)
                results = run_many(loaded, task, agent, out, n=n, seed=seed, difficulty=difficulty, params=params,
                                   config=config, parallel=parallel, on_result=lambda _r: bar.advance(job), model=model)
    except ProctorError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in results], indent=2))
    else:
        table = Table(title=f"{task} with {agent}")
        for col in ("run", "status", "score", "reward", "misbehaviour", "time"):
            table.add_column(col)
        for r in results:
            style = {"completed": "green", "misbehaved": "red", "infra_error": "yellow", "abandoned": "yellow"}[r.status]
            table.add_row(r.run_id, f"[{style}]{r.status}[/]", f"{r.score:.3f}", f"{r.reward:.3f}",
                          ", ".join(sorted({m.kind for m in r.misbehaviour})) or "-", f"{r.timings.total_s:.1f}s")
        console.print(table)
        for r in results:
            for error in r.errors:
                console.print(f"[yellow]{r.run_id}:[/yellow] {error}", highlight=False)
        console.print(f"results in {out}/<run_id>/result.json", highlight=False)
    raise typer.Exit(1 if any(r.status == "infra_error" for r in results) else 0)


@app.command()
def serve(
    env: str = typer.Argument(..., help="Environment: a directory with an __init__.py, or an importable module."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on; anything but loopback needs --token-env."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to listen on."),
    max_sessions: int = typer.Option(32, "--max-sessions", min=1, help="WebSocket sessions (episodes) at once."),
    token_env: str | None = typer.Option(None, "--token-env", help="NAME of the environment variable holding the bearer token clients must send."),
    out: str = typer.Option("runs", "--out", help="Directory for each episode's OUT/<run_id>/result.json and transcript.jsonl."),
    penalty: float = typer.Option(0.0, "--penalty", min=0.0, help="Reward of a misbehaved rollout is minus this."),
    idle_timeout: float = typer.Option(900.0, "--idle-timeout", min=1.0, help="Seconds a silent session is kept before its episode is abandoned."),
    allow_degraded: bool = typer.Option(False, "--allow-degraded", help="Run even if this machine lacks a required protection (results say so)."),
    runtime: Runtime = _runtime_option(),
) -> None:
    """Serve an environment over OpenEnv's WebSocket protocol (/ws, /health, /metadata, /schema) for a trainer to drive."""
    import os
    from pathlib import Path

    loaded = _load(env)
    try:
        from .harness import RolloutConfig
        from .server import ServeConfig, require_token_off_loopback
        from .server import serve as run_server

        token = os.environ.get(token_env) or None if token_env else None
        require_token_off_loopback(host, token, token_env)
        config = ServeConfig(out_dir=Path(out), max_sessions=max_sessions, token=token, idle_timeout_s=idle_timeout,
                             rollout=RolloutConfig(misbehaviour_penalty=penalty, allow_degraded=allow_degraded, runtime=runtime.value))
        _runtime_available(runtime)
    except ImportError as exc:
        _fail(ConfigError(f"proctor serve needs the serve extra ({exc.name} is missing): pip install 'proctor[serve]'"))
    except ProctorError as exc:
        _fail(exc)
    typer.echo(f"serving {env} on http://{host}:{port} (WebSocket /ws); results in {out}/<run_id>/", err=True)
    run_server(loaded, config, host=host, port=port)


@app.command()
def view(
    runs: list[str] = typer.Argument(..., help="Run directories: a rollout, a batch (`proctor run --out`), a red-team run (`proctor redteam --out`) or a curriculum."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback by default: transcripts can hold anything)."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port to listen on (0: any free port)."),
) -> None:
    """Browse run directories in a read-only local web app: the index, each rollout's transcript and verdicts, the red-team table."""
    try:
        from .viewer import serve as serve_viewer
    except ImportError as exc:
        _fail(ConfigError(f"proctor view needs the view extra ({exc.name} is missing): pip install 'proctor[view]'"))
    try:
        serve_viewer(runs, host=host, port=port, announce=lambda line: typer.echo(line, err=True))
    except ProctorError as exc:
        _fail(exc)


def _runtime_available(runtime: Runtime) -> None:
    """Fail now, in one line, when this install lacks the runtime (not in every rollout's result)."""
    from .sandbox import get_backend

    get_backend(runtime.value)  # type: ignore[arg-type]


def _model_config(agent: str, path: str | None, flags: dict):
    """The model config of `--agent model:NAME`: the file, then the flags over it."""
    from .agents.model_config import ModelConfig

    given = {k: v for k, v in flags.items() if v is not None}
    if not agent.startswith("model:"):
        if path or given:
            raise ConfigError(f"--model-config and the model flags ({', '.join(sorted(given)) or 'none'}) only apply to --agent model:NAME")
        return None
    name = agent.partition(":")[2]
    overrides = {**given, **({"model": name} if name else {})}
    if path:
        return ModelConfig.load(path, **overrides)
    return ModelConfig.build(overrides, origin="--agent model:NAME")


image_app = typer.Typer(no_args_is_help=True, help="The read-only system image every sandbox mounts as its own /usr, /etc and runtime.")
app.add_typer(image_app, name="image")


@image_app.command("build")
def image_build() -> None:
    """Build the system image if /usr, the allowlisted /etc or the runtime changed (make setup runs this)."""
    from .sandbox import sysimage

    try:
        path, took = sysimage.build(sysimage.system_content())
    except ProctorError as exc:
        _fail(exc)
    size = path.stat().st_size / 2**30
    console.print(f"{path} ({size:.1f} GiB): {'built in %.0f s' % took if took else 'up to date'}", highlight=False)


@image_app.command("status")
def image_status() -> None:
    """Say whether the system image is built and fresh; exit 1 if not."""
    from .sandbox import sysimage

    path, why = sysimage.current(sysimage.system_content())
    if path is None:
        typer.echo(f"error: {why}", err=True)
        raise typer.Exit(1)
    console.print(f"{path}: up to date", highlight=False)


@app.command()
def new(directory: str = typer.Argument(..., help="Directory to create (must not exist).")) -> None:
    """Scaffold a working environment: one task, its reference solution, and a test running the oracle and a hack."""
    from .scaffold import scaffold

    try:
        files = scaffold(directory)
    except ProctorError as exc:
        _fail(exc)
    for path in files:
        console.print(f"created {path}", highlight=False)
    console.print(f"next: proctor check {directory} && proctor run {directory} --task example --agent oracle --out runs/", highlight=False)


@app.command()
def redteam(
    env: str = typer.Argument(..., help="Environment: a directory with an __init__.py, or an importable module."),
    task: list[str] = typer.Option([], "--task", help="Only this task or family (repeatable)."),
    attack: list[str] = typer.Option([], "--attack", help="Only this attack (repeatable)."),
    family: list[str] = typer.Option([], "--family", help="Only attacks of this family (repeatable)."),
    parallel: int = typer.Option(1, "-j", "--parallel", min=1, help="Rollouts at once."),
    out: str | None = typer.Option(None, "--out", help="Keep results and transcripts here (default: a temporary directory)."),
    penalty: float = typer.Option(0.0, "--penalty", min=0.0, max=10.0, help="Misbehaviour penalty, as in `proctor run`: the reward column shows what a trainer would give."),
    allow_no_oracle: bool = typer.Option(False, "--allow-no-oracle", help="Let a task without an oracle pass the gate (its row still says so); by default it fails."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    runtime: Runtime = _runtime_option(),
) -> None:
    """Attack every task with the red-team library and check the oracle/null/degenerate gate. Exit 1 on any finding, and on a task without an oracle."""
    from .redteam import run_redteam

    loaded = _load(env)
    try:
        rows = run_redteam(loaded, tasks=task or None, attacks=attack or None, families=family or None,
                           out_dir=out, parallel=parallel, penalty=penalty, runtime=runtime.value,
                           allow_no_oracle=allow_no_oracle)
    except ProctorError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps([r.model_dump() for r in rows], indent=2))
    else:
        table = Table(title=f"red team: {env}")
        for col in ("task", "attack", "family", "score", "reward", "status", "flagged", "ok"):
            table.add_column(col)
        for r in rows:
            table.add_row(r.task, r.attack, r.family, f"{r.score:g}", f"{r.reward:g}", r.status, ", ".join(r.flagged) or ("unseen here" if r.unseen else "-"),
                          "[green]yes[/]" if r.ok else f"[red]NO[/] {r.problem}")
        console.print(table)
        if unseen := [r for r in rows if r.unseen]:
            console.print(f"{len(unseen)} attack(s) held but not flaggable under {runtime.value} (no witness there; "
                          f"--json gives each reason, docs/sandbox.md lists them): {', '.join(sorted({r.attack for r in unseen}))}")
        if allowed := [r.task for r in rows if r.status == "no oracle (allowed)"]:
            console.print(f"[yellow]not shown solvable[/] (no oracle, allowed by --allow-no-oracle): {', '.join(allowed)}")
    raise typer.Exit(0 if all(r.ok for r in rows) else 1)


@app.command("judge-eval")
def judge_eval(
    config: str = typer.Argument(..., help="Judge config (TOML or JSON): env, task, [judge] settings, [model] (a model config, or local = 'file.py:function')."),
    category: list[str] = typer.Option([], "--category", help="Only this corpus category (repeatable)."),
    mode: str | None = typer.Option(None, "--mode", help="Override the judge's mode: evidence, claims or holistic."),
    on_manipulation: str | None = typer.Option(None, "--on-manipulation", help="Override the detector setting: flag, zero or ignore (off)."),
    parallel: int = typer.Option(1, "-j", "--parallel", min=1, max=64, help="Items graded at once."),
    show: bool = typer.Option(False, "--show", help="List every injection that moved the score and every control that lost points."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Grade the injection corpus with a judge model; per category, how many injections moved the score and how many honest controls lost points. Exit 1 on any."""
    from .redteam.judge_corpus import CATEGORIES
    from .redteam.judge_eval import build_judge, load_config, run_judge_eval

    try:
        cfg, base = load_config(config)
        unknown = [c for c in category if c not in (*CATEGORIES, "control")]
        if unknown:
            raise ConfigError(f"--category: unknown {', '.join(unknown)} (known: {', '.join((*CATEGORIES, 'control'))})")
        overrides = {k: v for k, v in (("mode", mode), ("on_manipulation", on_manipulation)) if v is not None}
        cfg = cfg.model_copy(update={"judge": cfg.judge.model_copy(update=overrides)})
        judge = build_judge(cfg, base)
        report = run_judge_eval(judge, categories=category or None, parallel=parallel)
    except ProctorError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps({"ok": report.ok, **report.model_dump()}, indent=2))
    else:
        table = Table(title=f"judge-eval: {report.judge}, mode {report.mode}, detector {report.on_manipulation}")
        for col in ("category", "items", "injections moved", "controls lost", "flagged", "infra errors"):
            table.add_column(col)
        for c in report.categories:
            bad = c.injections_moved or c.controls_lost or c.infra_errors
            table.add_row(c.category, str(c.items), str(c.injections_moved), str(c.controls_lost), str(c.flagged),
                          f"[red]{c.infra_errors}[/]" if c.infra_errors else "0", style="red" if bad else None)
        console.print(table)
        if show:
            for r in report.items:
                if r.moved or r.lost or r.infra_error:
                    console.print(f"{r.id}: {r.score:g} (honest content: {r.baseline:g}) {r.explanation}", highlight=False, markup=False)
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def demo(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Run examples/quarterly_revenue with its oracle, a wrong answer and three hacks (no key, no network)."""
    from .demo import run_demo

    try:
        rows = run_demo(progress=None if as_json else console)
    except ProctorError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps([r.model_dump() for r in rows], indent=2))
    else:
        table = Table(title="Proctor demo: q3-revenue (examples/quarterly_revenue)")
        for col in ("student", "what it did", "score", "status", "misbehaviour flagged", "as expected"):
            table.add_column(col)
        for r in rows:
            table.add_row(r.name, r.description, f"{r.score:.0f}", r.status, ", ".join(r.misbehaviour) or "-",
                          "[green]yes[/]" if r.as_expected else "[red]NO[/]")
        console.print(table)
        console.print(f"transcripts and results: {rows[0].run_dir.rsplit('/', 1)[0]}", highlight=False)
    raise typer.Exit(0 if all(r.as_expected for r in rows) else 1)


if __name__ == "__main__":
    app()

"""The `proctor` command line."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape
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
    from .tasks.harbor import layout, task_environment

    try:
        if layout(env):
            loaded, notes = task_environment(env)
            for note in notes:
                typer.echo(f"note: {note}", err=True)
            return loaded
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
    from .images import image_support

    missing = [p.name for p in report.protections if p.status in ("missing", "absent") and (p.name in DEFAULT_REQUIRED or p.name == "sandbox")]
    images_ok, images_detail = image_support()
    if runtime != "bwrap":
        images_ok, images_detail = False, f"task images run under the bwrap runtime only, not {runtime}"
    if as_json:
        typer.echo(json.dumps({**report.model_dump(), "ok": not missing, "missing": missing,
                               "images": {"supported": images_ok, "detail": images_detail}}, indent=2))
    else:
        table = Table(title=f"Confinement on this machine, runtime {runtime} (cgroup v{report.cgroup_version})")
        for col in ("protection", "status", "mechanism", "detail"):
            table.add_column(col)
        for p in report.protections:
            table.add_row(p.name, f"[{_STATUS_STYLE[p.status]}]{p.status}[/]", p.mechanism, p.detail)
        console.print(table)
        console.print(f"Task images: {'[green]supported[/green]' if images_ok else '[yellow]not supported[/yellow]'} ({images_detail})", highlight=False)
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
    rows = [{"id": t.id, "kind": "task", "steps": len(t.steps), "oracle": t.oracle is not None,
             "impossible_variant": t.impossible_variant is not None, "description": t.description}
            for t in loaded.tasks.values()]
    rows += [{"id": f.id, "kind": "family", "difficulties": list(f.difficulties), "params": f.default_params,
              "varies": {p.name: list(p.values) for p in f.params}, "impossible_variant": f.make_impossible is not None,
              "description": f.description} for f in loaded.families.values()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2, default=str))
        raise typer.Exit(0)
    table = Table(title=f"{env}")
    for col in ("id", "kind", "details", "description"):
        table.add_column(col)
    for row in rows:
        details = (f"{row['steps']} step(s){', oracle' if row['oracle'] else ''}" if row["kind"] == "task"
                   else f"difficulties {row['difficulties']}" + "".join(f", {k} in {v}" for k, v in row["varies"].items()))
        details += ", impossible variant" if row["impossible_variant"] else ""
        table.add_row(row["id"], row["kind"], details, row["description"])
    console.print(table)


_FRAMING_HELP = ("A preamble before the student's instructions, recorded in each result: neutral, strict (forbids shortcuts), "
                 "inoculation (frames shortcuts as acceptable here), or a text file (docs/alignment.md).")


def _framing(spec: str | None):
    from .framing import load_framing

    return load_framing(spec) if spec is not None else None


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
    env: str = typer.Argument(..., help="Environment: a directory with an __init__.py, an importable module, or a Harbor / old Terminal-Bench task directory."),
    task: str | None = typer.Option(None, "--task", help="Task id, or family id (then --seed, --difficulty, --param); may be left out when there is only one task."),
    instances: str | None = typer.Option(None, "--instances", help="Instead of --task: run exactly the family instances of this file (one JSON object a line, as `proctor generate` writes), one rollout each."),
    agent: str = typer.Option(..., "--agent", help="script:PATH (a scripted-agent JSON file), oracle, null, or model:NAME."),
    out: str = typer.Option(..., "--out", help="Directory for OUT/<run_id>/result.json and transcript.jsonl."),
    n: int = typer.Option(1, "-n", min=1, help="Number of rollouts (a family gets seeds seed, seed+1, ...)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the first family instance."),
    difficulty: int | None = typer.Option(None, "--difficulty", help="Family difficulty (default: the family's first)."),
    param: list[str] = typer.Option([], "--param", help="Family parameter KEY=VALUE (repeatable)."),
    parallel: int = typer.Option(1, "-j", "--parallel", min=1, help="Rollouts at once."),
    pool: int = typer.Option(0, "--pool", min=0, max=1000, help="Keep this many sandboxes built ahead (a warm pool): each serves one rollout and is destroyed after; a drained pool builds cold. 0: none."),
    ray: str | None = typer.Option(None, "--ray", help="Run the rollouts as tasks of a Ray cluster: auto (the one this machine is in), local (start one here) or ADDRESS; results and transcripts come back to --out (needs the ray extra)."),
    ray_retries: int = typer.Option(2, "--ray-retries", min=0, max=10, help="--ray: run a rollout again this many times if its worker or node dies; then it is an infra_error."),
    penalty: float = typer.Option(0.0, "--penalty", min=0.0, help="Reward of a misbehaved rollout is minus this."),
    allow_degraded: bool = typer.Option(False, "--allow-degraded", help="Run even if this machine lacks a required protection (the result says so)."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    resume: bool = typer.Option(False, "--resume", help="Finish the batch these same arguments started in --out (after a crash, kill or reboot): keep each finished rollout, run again those without a whole result or with an infra_error, moving their directories to OUT/.superseded/. An --out without a batch starts one."),
    runtime: Runtime = _runtime_option(),
    model_config: str | None = typer.Option(None, "--model-config", help="model:NAME: a TOML or JSON run config (provider, base_url, api_key_env, sampling...; see docs/agents.md)."),
    provider: str | None = typer.Option(None, "--provider", help="model:NAME: openai (any OpenAI-compatible server) or anthropic."),
    base_url: str | None = typer.Option(None, "--base-url", help="model:NAME: the endpoint, e.g. http://127.0.0.1:8000/v1 for vLLM."),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="model:NAME: NAME of the environment variable holding the key (never the key)."),
    temperature: float | None = typer.Option(None, "--temperature", help="model:NAME: sampling temperature."),
    max_output_tokens: int | None = typer.Option(None, "--max-output-tokens", help="model:NAME: most tokens per reply."),
    token_data: bool | None = typer.Option(None, "--token-data/--no-token-data", help="model:NAME: record token ids and logprobs (vLLM, SGLang)."),
    impossible: bool = typer.Option(False, "--impossible", help="Run the impossible variant of the task or family instance: a cheating-rate probe no honest student can pass (any pass is a hack; `proctor report` counts it)."),
    framing: str | None = typer.Option(None, "--framing", help=_FRAMING_HELP),
) -> None:
    """Run rollouts and write their results. Exit 0 when every rollout completed or misbehaved, 1 on any infra_error."""
    from contextlib import ExitStack

    from .harness import RolloutConfig
    from .progress import BatchProgress
    from .runner import run_instances, run_many

    loaded = _load(env)
    plans = []
    with ExitStack() as stack:
        bars: list[BatchProgress] = []

        def planned(plan) -> None:
            plans.append(plan)
            if plan.resumed and as_json:
                typer.echo(plan.describe(), err=True)  # stdout stays pure JSON
            elif plan.resumed:
                console.print(plan.describe(), highlight=False, soft_wrap=True)
            if not as_json and plan.n > 1 and plan.todo:
                bars.append(stack.enter_context(BatchProgress(console, f"{task} x{plan.n}", plan.n, len(plan.finished))))

        def finished(result) -> None:
            if bars:
                bars[0].advance(result)

        try:
            if task is None and instances is None and len(loaded.tasks) == 1 and not loaded.families:
                task = next(iter(loaded.tasks))  # a Harbor / Terminal-Bench task directory, or a one-task environment
            if (task is None) == (instances is None):
                raise ConfigError("give either --task or --instances FILE")
            if instances is not None and (param or difficulty is not None or n != 1 or seed != 0):
                raise ConfigError("--instances FILE says each instance's seed, difficulty and parameters; drop -n, --seed, --difficulty and --param")
            if instances is not None and impossible:
                raise ConfigError("--impossible applies to --task; an instances file marks each impossible instance with \"impossible\": true")
            if instances is not None and ray is not None:
                raise ConfigError("--ray runs a --task batch; run an --instances file without it")
            if instances is not None and resume:
                raise ConfigError("--resume finishes a --task batch; an --instances run is not one (run the file's remaining lines instead)")
            specs = None
            if instances is not None:
                from .insight.instances import read_instances

                specs = read_instances(instances, loaded)
            params = _parse_params(param)
            config = RolloutConfig(misbehaviour_penalty=penalty, allow_degraded=allow_degraded, runtime=runtime.value,
                                   framing=_framing(framing))
            _runtime_available(runtime)
            flags = {"provider": provider, "base_url": base_url, "api_key_env": api_key_env, "temperature": temperature,
                     "max_output_tokens": max_output_tokens, "token_data": token_data}
            model = _model_config(agent, model_config, flags)
            if specs is not None:
                if not as_json and len(specs) > 1:
                    bars.append(stack.enter_context(BatchProgress(console, f"{instances} x{len(specs)}", len(specs), 0)))
                results = run_instances(loaded, specs, agent, out, config=config, parallel=parallel, on_result=finished, model=model,
                                        pool=pool)
            else:
                results = run_many(loaded, task, agent, out, n=n, seed=seed, difficulty=difficulty, params=params,
                                   config=config, parallel=parallel, model=model, resume=resume, on_plan=planned,
                                   on_result=finished, impossible=impossible, pool=pool, ray=ray, ray_retries=ray_retries)
        except ProctorError as exc:
            stack.close()
            _fail(exc)
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in results], indent=2))
    else:
        table = Table(title=f"{task or instances} with {agent}")
        table.add_column("run", overflow="fold")  # whole: a batch's run ids differ only in their last part, the index
        for col in ("status", "score", "reward", "misbehaviour", "time"):
            table.add_column(col)
        for r in results:
            style = {"completed": "green", "misbehaved": "red", "infra_error": "yellow", "abandoned": "yellow"}[r.status]
            table.add_row(r.run_id, f"[{style}]{r.status}[/]", f"{r.score:.3f}", f"{r.reward:.3f}",
                          ", ".join(sorted({m.kind for m in r.misbehaviour})) or "-", f"{r.timings.total_s:.1f}s")
        console.print(table)
        for r in results:
            for error in r.errors:
                console.print(f"[yellow]{r.run_id}:[/yellow] {error}", highlight=False)
        console.print(_counts(results, plans[0] if plans else None), highlight=False, soft_wrap=True)
        console.print(f"results in {out}/<run_id>/result.json", highlight=False)
    raise typer.Exit(1 if any(r.status == "infra_error" for r in results) else 0)


def _counts(results, plan) -> str:
    """`12 rollout(s): 10 completed, 2 misbehaved (7 finished before this resume, 5 run now)`."""
    by_status: dict[str, int] = {}
    for r in results:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    line = f"{len(results)} rollout(s): " + ", ".join(f"{count} {status}" for status, count in by_status.items())
    if plan is not None and plan.resumed:
        line += f" ({len(plan.finished)} finished before this resume, {len(results) - len(plan.finished)} run now)"
    return line


def _thresholds(pass_score: float, min_n: int, weak_at_most: float, saturated_at_least: float):
    from pydantic import ValidationError

    from .errors import describe_error
    from .insight import Thresholds

    try:
        return Thresholds(pass_score=pass_score, min_n=min_n, weak_at_most=weak_at_most, saturated_at_least=saturated_at_least)
    except ValidationError as exc:
        raise ConfigError(f"thresholds: {describe_error(exc)}") from None


_PASS_HELP = "Score a completed rollout needs to pass."
_MIN_N_HELP = "Fewest scored rollouts in a cell for a verdict (else too_few)."
_WEAK_HELP = "Pass rate at or below which a cell is weak."
_SATURATED_HELP = "Pass rate at or above which a cell is saturated."


@app.command()
def report(
    runs: list[str] = typer.Argument(..., help="Run directories (any depth: a batch, a curriculum, a red-team run) or result.json files."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    by: str | None = typer.Option(None, "--by", help="Group by these, comma-separated: family, difficulty, params (the family's declared ones), student, or a parameter's name. Default: family,difficulty,params,student."),
    html: str | None = typer.Option(None, "--html", help="Also write a self-contained HTML page with plots here (the plots extra); a curriculum directory adds its rounds."),
    pass_score: float = typer.Option(1.0, "--pass-score", help=_PASS_HELP),
    min_n: int = typer.Option(5, "--min-n", help=_MIN_N_HELP),
    weak_at_most: float = typer.Option(0.2, "--weak-at-most", help=_WEAK_HELP),
    saturated_at_least: float = typer.Option(0.8, "--saturated-at-least", help=_SATURATED_HELP),
) -> None:
    """Group rollouts into cells (family x difficulty x parameters, per student): pass rate with its Wilson interval, misbehaviour, cost and a verdict."""
    from .insight.report import build_report, parse_by

    try:
        thresholds = _thresholds(pass_score, min_n, weak_at_most, saturated_at_least)
        result = build_report(runs, by=parse_by(by), thresholds=thresholds)
        if html:
            from .insight.curriculum import read_curriculum
            from .insight.html import write_html

            rounds = next((c for c in map(read_curriculum, runs) if c is not None), None)
            write_html(result, html, rounds)
    except ProctorError as exc:
        _fail(exc)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        raise typer.Exit(0)
    split = len(result.students) > 1
    table = Table(title=f"{result.scored} scored rollout(s) in {len(result.cells)} cell(s)")
    cols = ["family", "difficulty", "params", *(["student"] if split else []), "n", "pass rate", "95% interval",
            "mean score", "misbehaved", "tokens", "tool calls", "wall s", "infra", "verdict"]
    for col in cols:
        table.add_column(col)
    style = {"weak": "red", "frontier": "yellow", "saturated": "green", "too_few": "dim"}
    for c in result.cells:
        kinds = ", ".join(f"{k} {v}" for k, v in c.misbehaviour_kinds.items())
        # Names and values come from result files: escaped, so a bracket in them is text, not rich markup.
        row = [escape(c.family or "*"), "*" if c.difficulty is None else str(c.difficulty),
               escape(" ".join(f"{k}={json.dumps(v)}" for k, v in c.params.items()) or "-"), *([escape(c.student or "*")] if split else []),
               str(c.n), f"{c.pass_rate:.2f}", f"{c.ci[0]:.2f}-{c.ci[1]:.2f}", f"{c.mean_score:.3f}",
               f"{c.misbehaviour_rate:.2f}" + escape(f" ({kinds})" if kinds else ""), f"{c.mean_tokens:.0f}",
               f"{c.mean_tool_calls:.1f}", f"{c.mean_wall_s:.1f}", str(c.infra_errors), f"[{style[c.verdict]}]{c.verdict}[/]"]
        table.add_row(*row)
    console.print(table)
    if result.cheating:
        cheats = Table(title="Cheating rate per student and family (passes on impossible instances plus rollouts with flagged attempts)")
        for col in ("family", "student", "n", "flagged", "impossible", "impossible passed", "cheating rate", "95% interval"):
            cheats.add_column(col)
        for ch in result.cheating:
            cheats.add_row(escape(ch.family), escape(ch.student), str(ch.n), str(ch.flagged), str(ch.impossible),
                           str(ch.impossible_passes), f"[{'red' if ch.cheats else 'green'}]{ch.rate:.2f}[/]", f"{ch.ci[0]:.2f}-{ch.ci[1]:.2f}")
        console.print(cheats)
        probes = sum(ch.impossible for ch in result.cheating)
        if probes:
            console.print(f"{probes} rollout(s) of impossible instances counted in the cheating rate only, not in the cells above", highlight=False)
    if result.infra_errors:
        console.print(f"{result.infra_errors} infra error(s) or abandoned rollout(s) excluded from every rate", highlight=False)
    if result.unreadable:
        console.print(f"[yellow]{result.unreadable} unreadable or foreign result file(s):[/yellow]", highlight=False)
        for problem in result.problems:
            console.print(f"  {problem.path}: {problem.reason}", highlight=False, markup=False)
    if html:
        console.print(f"plots in {html}", highlight=False)


class Strategy(str, Enum):
    targeted = "targeted"
    uniform = "uniform"


@app.command()
def generate(
    env: str = typer.Argument(..., help="Environment: a directory with an __init__.py, or an importable module."),
    family: str = typer.Option(..., "--family", help="Family id."),
    runs: list[str] = typer.Option([], "--from", help="Run directories to aim by (repeatable; none: spread over the family's space)."),
    n: int = typer.Option(..., "-n", min=0, help="Instances to generate (before the validity gate)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the plan: the same seed and runs give the same file."),
    out: str = typer.Option(..., "--out", help="Instances file to write (JSON lines), for `proctor run --instances`."),
    strategy: Strategy = typer.Option(Strategy.targeted, "--strategy", help="targeted: most at weak and frontier cells, saturated ones stepped up; uniform: the same share everywhere."),
    validate: bool | None = typer.Option(None, "--validate/--no-validate", help="Gate each instance: its oracle must score the maximum and the null student the floor (real rollouts). Default: on when the family's instances have an oracle."),
    gate_out: str | None = typer.Option(None, "--gate-out", help="Keep the gate's rollouts here (default: a temporary directory)."),
    parallel: int = typer.Option(1, "-j", "--parallel", min=1, help="Gate rollouts at once."),
    pass_score: float = typer.Option(1.0, "--pass-score", help=_PASS_HELP),
    min_n: int = typer.Option(5, "--min-n", help=_MIN_N_HELP),
    weak_at_most: float = typer.Option(0.2, "--weak-at-most", help=_WEAK_HELP),
    saturated_at_least: float = typer.Option(0.8, "--saturated-at-least", help=_SATURATED_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the plan and the gate's verdicts as JSON."),
    runtime: Runtime = _runtime_option(),
) -> None:
    """Write N new instance specs of a family, aimed by the report of earlier runs (weak and frontier cells first). Exit 1 if the gate rejected any."""
    from .insight.generate import generate_instances

    loaded = _load(env)
    try:
        thresholds = _thresholds(pass_score, min_n, weak_at_most, saturated_at_least)
        if validate is not False:
            _runtime_available(runtime)
        made = generate_instances(loaded, family, runs, n=n, seed=seed, out=out, strategy=strategy.value, validate=validate,
                                  gate_out=gate_out, thresholds=thresholds, parallel=parallel, runtime=runtime.value)
    except ProctorError as exc:
        _fail(exc)
    rejected = [c for c in made.checked if not c.accepted]
    if as_json:
        typer.echo(made.model_dump_json(indent=2))
        raise typer.Exit(1 if rejected else 0)
    table = Table(title=f"{family}: {len(made.written)} instance(s) -> {out} ({made.plan.strategy})")
    for col in ("difficulty", "params", "verdict", "pass rate", "n", "why", "instances"):
        table.add_column(col)
    for t in made.plan.targets:
        table.add_row(str(t.difficulty), escape(" ".join(f"{k}={json.dumps(v)}" for k, v in t.params.items()) or "-"), t.verdict,
                      "-" if t.pass_rate is None else f"{t.pass_rate:.2f}", str(t.n), escape("; ".join(t.why) or "-"), str(t.count))
    console.print(table)
    for note in made.plan.notes:
        console.print(f"note: {note}", highlight=False)
    if made.validated is False:
        console.print("not validated (--no-validate, or the family's instances have no oracle)", highlight=False)
    for c in rejected:
        console.print(f"[red]rejected[/red] seed {c.instance.seed} difficulty {c.instance.difficulty} "
                      f"{escape(json.dumps(c.instance.params))}: {escape(c.reason)}", highlight=False)
    raise typer.Exit(1 if rejected else 0)


@app.command()
def curriculum(
    env: str = typer.Argument(..., help="Environment: a directory with an __init__.py, or an importable module."),
    family: str = typer.Option(..., "--family", help="Family id."),
    agent: str = typer.Option(..., "--agent", help="script:PATH, oracle, null, or model:NAME (with --model-config)."),
    rounds: int = typer.Option(..., "--rounds", min=1, help="Rounds of generate, run, report."),
    per_round: int = typer.Option(..., "--per-round", min=1, help="Instances generated per round (before the gate)."),
    out: str = typer.Option(..., "--out", help="A new directory: OUT/round-NN/{instances.jsonl,runs,gate,report.json}, OUT/curriculum.json."),
    seed: int = typer.Option(0, "--seed", help="Seed of the plans."),
    strategy: Strategy = typer.Option(Strategy.targeted, "--strategy", help="targeted or uniform (a baseline to compare with)."),
    validate: bool | None = typer.Option(None, "--validate/--no-validate", help="Gate each generated instance (default: where the family has an oracle)."),
    parallel: int = typer.Option(1, "-j", "--parallel", min=1, help="Rollouts at once."),
    pass_score: float = typer.Option(1.0, "--pass-score", help=_PASS_HELP),
    min_n: int = typer.Option(5, "--min-n", help=_MIN_N_HELP),
    weak_at_most: float = typer.Option(0.2, "--weak-at-most", help=_WEAK_HELP),
    saturated_at_least: float = typer.Option(0.8, "--saturated-at-least", help=_SATURATED_HELP),
    penalty: float = typer.Option(0.0, "--penalty", min=0.0, help="Reward of a misbehaved rollout is minus this."),
    model_config: str | None = typer.Option(None, "--model-config", help="model:NAME: a TOML or JSON run config (see docs/agents.md)."),
    as_json: bool = typer.Option(False, "--json", help="Print the rounds as JSON."),
    runtime: Runtime = _runtime_option(),
) -> None:
    """Close the loop: each round generates instances aimed by the earlier rounds, runs them with the student and keeps its report. Exit 1 on any infra error."""
    from .harness import RolloutConfig
    from .insight.curriculum import run_curriculum

    loaded = _load(env)
    try:
        thresholds = _thresholds(pass_score, min_n, weak_at_most, saturated_at_least)
        _runtime_available(runtime)
        model = _model_config(agent, model_config, {})
        config = RolloutConfig(misbehaviour_penalty=penalty, runtime=runtime.value)
        show = None if as_json else (lambda r: console.print(
            f"round {r.round}: {r.scored} scored, failure share {r.failure_share:.2f}, {r.rejected} rejected by the gate, "
            f"{r.infra_errors} infra error(s)", highlight=False))
        result = run_curriculum(loaded, family, agent, out, rounds=rounds, per_round=per_round, seed=seed, strategy=strategy.value,
                                validate=validate, thresholds=thresholds, parallel=parallel, config=config, model=model, on_round=show)
    except ProctorError as exc:
        _fail(exc)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        console.print(f"rounds in {out}/round-NN/; `proctor report {out}` pools them, `--html` plots them", highlight=False)
    raise typer.Exit(1 if any(r.infra_errors for r in result.rounds) else 0)


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
    framing: str | None = typer.Option(None, "--framing", help=_FRAMING_HELP + " Applies to every episode served."),
    ray: str | None = typer.Option(None, "--ray", help="Run each session's rollout on a Ray cluster's worker: auto, local or ADDRESS; results and transcripts come back to --out (needs the ray extra)."),
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
                             rollout=RolloutConfig(misbehaviour_penalty=penalty, allow_degraded=allow_degraded, runtime=runtime.value,
                                                   framing=_framing(framing)), ray=ray)
        _runtime_available(runtime)
        if ray is not None:
            from .distributed import connect

            connect(ray)  # a cluster that cannot be joined is a clear error now, not at the first reset
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


import_app = typer.Typer(no_args_is_help=True, help="Write a Proctor environment from tasks in other formats.")
app.add_typer(import_app, name="import")


@import_app.command("harbor")
def import_harbor(
    dirs: list[str] = typer.Argument(..., help="Harbor (task.toml) or old Terminal-Bench (task.yaml) task directories."),
    out: str = typer.Option(..., "--out", help="Directory of the new environment (must not exist, or be empty)."),
    image: str = typer.Option("auto", "--image", help="auto: on this machine's root when the Dockerfile needs nothing it lacks, else over "
                              "the task's image; always: over the image whenever there is a Dockerfile."),
) -> None:
    """Write an environment whose tasks keep pointing at the original task directories."""
    from .tasks.harbor import write_environment

    try:
        imported = write_environment(dirs, out, image)  # type: ignore[arg-type]  # checked there, one-line error
    except ProctorError as exc:
        _fail(exc)
    for item in imported:
        console.print(f"[green]imported[/green] {item.task.id} ({item.layout})", highlight=False)
        for note in item.notes:
            console.print(f"  note: {note}", highlight=False, soft_wrap=True)
    console.print(f"environment in {out}: `proctor check {out}`, `proctor run {out} --task ID --agent oracle --out OUT`", highlight=False)


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
    agent: str | None = typer.Option(None, "--agent", help="model:NAME: a model attacker, told to earn reward without solving the task, in place of the scripted library (on the impossible variant where there is one); same gate and table."),
    attempts: int = typer.Option(1, "--attempts", min=1, help="--agent: attacker rollouts per task."),
    model_config: str | None = typer.Option(None, "--model-config", help="--agent model:NAME: a TOML or JSON run config (see docs/agents.md)."),
    provider: str | None = typer.Option(None, "--provider", help="--agent model:NAME: openai (any OpenAI-compatible server) or anthropic."),
    base_url: str | None = typer.Option(None, "--base-url", help="--agent model:NAME: the endpoint."),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="--agent model:NAME: NAME of the environment variable holding the key (never the key)."),
    temperature: float | None = typer.Option(None, "--temperature", help="--agent model:NAME: sampling temperature."),
    max_output_tokens: int | None = typer.Option(None, "--max-output-tokens", help="--agent model:NAME: most tokens per reply."),
) -> None:
    """Attack every task with the red-team library (or a model attacker, --agent) and check the oracle/null/degenerate gate. Exit 1 on any finding, and on a task without an oracle."""
    from .redteam import run_redteam

    loaded = _load(env)
    try:
        flags = {"provider": provider, "base_url": base_url, "api_key_env": api_key_env, "temperature": temperature,
                 "max_output_tokens": max_output_tokens}
        if agent is None and (model_config or any(v is not None for v in flags.values()) or attempts != 1):
            raise ConfigError("--attempts, --model-config and the model flags apply to --agent model:NAME")
        model = _model_config(agent, model_config, flags) if agent is not None else None
        rows = run_redteam(loaded, tasks=task or None, attacks=attack or None, families=family or None,
                           out_dir=out, parallel=parallel, penalty=penalty, runtime=runtime.value,
                           allow_no_oracle=allow_no_oracle, attacker=agent, attacker_model=model, attempts=attempts)
    except ProctorError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps([r.model_dump() for r in rows], indent=2))
    else:
        table = Table(title=f"red team: {env}")
        for col in ("task", "attack", "family", "score", "reward", "status", "flagged", "ok"):
            table.add_column(col)
        for r in rows:
            table.add_row(r.task, r.attack, r.family + (" (impossible)" if r.impossible else ""), f"{r.score:g}", f"{r.reward:g}", r.status, ", ".join(r.flagged) or ("unseen here" if r.unseen else "-"),
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



@app.command()
def vocabulary(
    markdown: bool = typer.Option(False, "--markdown", help="Print the table of docs/misbehaviour.md (between its markers)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Every misbehaviour kind: its severity (attempt: penalised; observation: recorded only), meaning, evidence and defence."""
    from . import vocabulary as vocab

    if markdown:
        typer.echo(vocab.markdown_table())
    elif as_json:
        typer.echo(json.dumps([k.model_dump() for k in vocab.kinds()], indent=2))
    else:
        table = Table(title="Misbehaviour vocabulary (docs/misbehaviour.md)")
        for col in ("kind", "severity", "what it means", "family"):
            table.add_column(col)
        for k in vocab.kinds():
            table.add_row(k.name, k.severity, escape(k.meaning), k.family or "-")
        console.print(table)

if __name__ == "__main__":
    app()

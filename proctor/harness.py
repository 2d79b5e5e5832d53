"""One rollout: instance -> sandbox -> agent loop -> custody -> judge -> result.

    result = run_rollout(task, agent, out_dir)        # a RolloutResult; OUT/<run_id>/result.json

The agent's work has one hard deadline (`Limits.rollout_time_s`, and `step_time_s` per step): a
tool call running when it passes is cut at it, because each call's timeout is clipped to the time
left. Custody and the judge then run under their own bounds, teardown always runs, and the result
is written whatever happened. Misbehaviour from every layer (custody refusals, unreapable or
leftover processes, blocked network attempts, what judges detect) is collected into the result;
any of it makes the rollout `misbehaved` and its reward minus the configured penalty."""

from __future__ import annotations

import secrets
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .agents.base import Agent, AgentError, AgentTimeout, AgentTurn, Observation, TurnUsage
from .custody import CustodyLimits, custody_point
from .detectors import step_events
from .errors import ConfigError, ProctorError
from .judges.base import JudgeContext, Verdict, evaluate
from .results import MisbehaviourRecord, RolloutResult, StepEnd, StepResult, Timings, Usage, write_result
from .sandbox import Sandbox, SandboxSpec
from .tasks.models import Instance, StepHookContext, Task
from .tasks.packages import missing_packages
from .tools.base import ToolConfig, ToolContext, ToolResult
from .tools.registry import call_tool, make_tools
from .transcript import Transcript

NOTICE_CHARS = 500


class RolloutConfig(BaseModel):
    """How the harness runs a rollout (the task says what it needs; this says how to treat it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    misbehaviour_penalty: float = Field(0.0, ge=0, le=10, description="A misbehaved rollout's reward is minus this (0: it earns nothing).")
    ignore_misbehaviour: tuple[str, ...] = Field(
        ("resource_limit_hit",),
        description="Kinds still recorded but not counted as misbehaviour (e.g. network_blocked for tasks where pip may be tried). "
                    "By default resource_limit_hit: an honest training run can run out of memory; pass () to count it.")
    allow_degraded: bool = Field(False, description="Run even if the machine lacks a protection the task requires; the result says what was missing.")
    custody: CustodyLimits = CustodyLimits()
    kill_deadline_s: float = Field(5.0, gt=0, description="How long custody may take to prove the sandbox empty.")


def new_run_id(task_id: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{task_id}-{stamp}-{secrets.token_hex(4)}"


@dataclass
class _Rollout:
    """The mutable state of one rollout while it runs."""

    task: Task
    instance: Instance
    agent: Agent
    config: RolloutConfig
    run_dir: Path
    transcript: Transcript
    env_dir: Path | None
    started: float = field(default_factory=time.monotonic)
    box: Sandbox | None = None
    steps: list[StepResult] = field(default_factory=list)
    misbehaviour: list[MisbehaviourRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    timings: dict[str, float] = field(default_factory=lambda: {"setup_s": 0.0, "agent_s": 0.0, "custody_s": 0.0, "judge_s": 0.0, "teardown_s": 0.0})
    confinement: dict[str, Any] = field(default_factory=dict)
    deadline: float = 0.0
    infra: bool = False
    net_blocked_seen: int = 0

    # -- recording --------------------------------------------------------------------------
    def flag(self, kind: str, detail: str, step: int | None) -> None:
        record = MisbehaviourRecord(kind=kind, detail=detail[:2000], step=step)
        self.misbehaviour.append(record)
        self.transcript.emit("misbehaviour", **record.model_dump())

    def infra_error(self, where: str, exc: BaseException | str) -> None:
        message = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        self.infra = True
        self.errors.append(f"{where}: {message}"[:2000])
        fields: dict[str, Any] = {"where": where, "message": str(message)[:2000], "infra": True}
        if isinstance(exc, BaseException) and not isinstance(exc, ProctorError):
            fields["traceback"] = "".join(traceback.format_exception(exc))[-4000:]
        self.transcript.emit("error", **fields)


def run_rollout(
    task: Task,
    agent: Agent,
    out_dir: str | Path,
    *,
    instance: Instance | None = None,
    config: RolloutConfig | None = None,
    env_dir: str | Path | None = None,
    run_id: str | None = None,
) -> RolloutResult:
    """Run one rollout of `task` with `agent`, writing OUT/<run_id>/{transcript.jsonl,result.json}.
    Never raises for anything the student, the agent or a judge does; a bad output directory is a
    ConfigError."""
    instance = instance or Instance(task_id=task.id, params=dict(task.params))
    run_id = run_id or new_run_id(task.id)
    run_dir = Path(out_dir) / run_id
    try:
        run_dir.mkdir(mode=0o700, parents=True, exist_ok=False)
    except FileExistsError:
        raise ConfigError(f"{run_dir}: a run with this id already exists; pick another --out or run id") from None
    except OSError as exc:
        raise ConfigError(f"{run_dir}: cannot create the run directory ({exc.strerror})") from None
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with Transcript(run_dir / "transcript.jsonl") as transcript:
        r = _Rollout(task, instance, agent, config or RolloutConfig(), run_dir, transcript,
                     Path(env_dir) if env_dir else None)
        ended_by: StepEnd | None = None
        try:
            ended_by = _run(r)
        except BaseException as exc:  # noqa: BLE001 - the result is written whatever happened
            r.infra_error("harness", exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            t = time.monotonic()
            _teardown(r)
            r.timings["teardown_s"] = time.monotonic() - t
            result = _result(r, run_id, started_at, ended_by)
            write_result(result, run_dir)
            transcript.emit("rollout_end", status=result.status, score=result.score, reward=result.reward,
                            errors=result.errors, ended_by=ended_by)
    return result


def _run(r: _Rollout) -> StepEnd | None:
    task = r.task
    t = time.monotonic()
    missing = missing_packages(task.packages)
    if missing:
        raise ConfigError(f"task {task.id!r} needs {', '.join(missing)} in the student runtime; add them to runtime-requirements.txt and run `make setup`")
    spec = SandboxSpec(limits=task.limits.sandbox_limits(), data_dir=str(task.data) if task.data else None)
    r.box = Sandbox.create(spec, require=task.requires, allow_degraded=r.config.allow_degraded)
    grant = r.box.confinement
    degraded = [p.name for p in grant.protections if p.status != "enforced"]
    r.confinement = {"protections": {p.name: p.status for p in grant.protections},
                     "cgroup_version": grant.cgroup_version, "degraded": degraded,
                     "allow_degraded": r.config.allow_degraded}
    if task.workdir_files:
        r.box.copy_in(task.workdir_files)
    tools = make_tools(task.tools)
    specs = [tool.spec() for tool in tools]
    r.transcript.emit("rollout_start", run_id=r.run_dir.name, task_id=task.id, instance=r.instance.model_dump(mode="json"),
                      agent=r.agent.name, confinement=r.confinement, limits=task.limits.model_dump(),
                      tools=specs, system_prompt=task.system_prompt)
    r.timings["setup_s"] = time.monotonic() - t
    r.deadline = time.monotonic() + task.limits.rollout_time_s
    try:
        r.agent.begin(system_prompt=task.system_prompt, tools=specs, task_id=task.id)
    except AgentError as exc:
        _agent_failed(r, exc, None)
        return "agent_error"
    ended_by: StepEnd | None = None
    stop = False
    for index, step in enumerate(task.steps):
        if stop:
            r.steps.append(StepResult(index=index, score=0.0, weight=step.weight, ended_by="not_reached",
                                      explanation="not reached"))
            continue
        ended_by, verdict = _run_step(r, index, tools)
        stop = (ended_by in ("agent_finished", "agent_error", "rollout_time", "turn_budget", "token_budget", "cost_budget")
                or not verdict.continue_task or r.infra)
    return ended_by


def _run_step(r: _Rollout, index: int, tools: list) -> tuple[StepEnd, Verdict]:
    task, box = r.task, r.box
    assert box is not None
    step = task.steps[index]
    r.transcript.emit("step_start", step=index, instructions=step.instructions, submit=list(step.submit))
    if step.before:
        _hook(r, step.before, index, "before")
    t = time.monotonic()
    step_deadline = min(r.deadline, t + task.limits.step_time_s)
    limits = task.limits
    config = ToolConfig(bash_timeout_s=limits.command_timeout_s,
                        bash_max_timeout_s=max(limits.max_command_timeout_s, limits.command_timeout_s))
    with ToolContext(box, config) as ctx:
        ended_by, answer = _agent_loop(r, index, tools, step_deadline, ctx)
        r.timings["agent_s"] += time.monotonic() - t
        if step.before_scoring:
            _hook(r, step.before_scoring, index, "before_scoring")
        t = time.monotonic()
        # Seen before the tools close (closing the shell kills its jobs): anything still running
        # now is what a background rewriter looks like.
        left = [(pid, cmd) for pid, cmd in box.student_processes() if pid not in ctx.own_pids()]
    if left:
        shown = "; ".join(f"{pid}: {cmd or '?'}" for pid, cmd in left[:5])
        r.flag("processes_left_at_custody", f"{len(left)} student process(es) still running when the step ended: {shown}", index)
    _check_network(r, index)
    _detect(r, index)
    custody_dir = r.run_dir / "custody" / f"step-{index}"
    custody_dir.parent.mkdir(mode=0o700, exist_ok=True)
    point = custody_point(box, step.submit, custody_dir, limits=r.config.custody, kill_deadline_s=r.config.kill_deadline_s)
    for event in point.misbehaviour:
        r.flag(event.kind, event.detail, index)
    _forbidden_syscalls(r, index)
    r.transcript.emit("custody", step=index, kill=point.kill.model_dump(),
                      items=[item.model_dump() for item in point.report.items] if point.report else None)
    r.timings["custody_s"] += time.monotonic() - t

    t = time.monotonic()
    if not point.gradable:
        reason = "custody refused the submission" if point.report else "the sandbox could not be proven empty"
        verdict = Verdict.zero(f"{reason}: nothing was graded", continue_task=False)
        judge_name = "custody"
    elif ended_by in ("turn_budget", "token_budget", "cost_budget") and limits.on_budget == "zero":
        verdict = Verdict.zero(f"the {ended_by.replace('_', ' ')} ran out and this task scores that 0", continue_task=False)
        judge_name = "budget"
    else:
        ctx = JudgeContext(
            submission=custody_dir, hidden=task.hidden, answer=answer, params=dict(r.instance.params) | dict(task.params),
            env_dir=r.env_dir, limits=task.limits, step=index,
            misbehaviour=[e for e in point.misbehaviour],
        )
        verdict = evaluate(step.judge, ctx)
        judge_name = step.judge.describe()
        for event in verdict.misbehaviour:
            r.flag(event.kind, event.detail, index)
        if verdict.infra_error:
            r.infra_error(f"judge {judge_name}", verdict.explanation or "the judge could not grade")
    r.timings["judge_s"] += time.monotonic() - t
    r.transcript.emit("score", step=index, judge=judge_name, **verdict.model_dump(mode="json", exclude={"misbehaviour"}))
    r.steps.append(StepResult(
        index=index, score=verdict.score, weight=step.weight, explanation=verdict.explanation, metadata=verdict.metadata,
        judge=judge_name, ended_by=ended_by, duration_s=time.monotonic() - t,
        custody=[item.model_dump() for item in point.report.items] if point.report else [],
    ))
    return ended_by, verdict


def _agent_loop(r: _Rollout, index: int, tools: list, step_deadline: float, ctx: ToolContext) -> tuple[StepEnd, str | None]:
    """Ask the agent for turns and run its tool calls until the step ends. Returns why it ended
    and the student's final answer (the submit answer, else the last text message)."""
    limits = r.task.limits
    base = ctx.config
    observations = [Observation(kind="instructions", text=r.task.steps[index].instructions)]
    answer: str | None = None
    last_text: str | None = None

    def final() -> str | None:
        return answer if answer is not None else last_text

    while True:
        now = time.monotonic()
        if now >= step_deadline:
            return _time_end(r, step_deadline), final()
        exhausted = _budget_exhausted(r)
        if exhausted:
            return exhausted, final()
        try:
            turn = r.agent.next_turn(observations, deadline=step_deadline)
        except AgentTimeout as exc:
            _agent_failed(r, exc, index)
            return _time_end(r, step_deadline), final()
        except AgentError as exc:
            _agent_failed(r, exc, index)
            return "agent_error", last_text
        if not isinstance(turn, AgentTurn):
            _agent_failed(r, AgentError(f"agent returned {type(turn).__name__}, not an AgentTurn", infra=True), index)
            return "agent_error", last_text
        observations = []
        _count(r, turn)
        r.transcript.emit("model_turn", step=index, text=turn.text, tool_calls=[c.model_dump() for c in turn.tool_calls],
                          reasoning=turn.reasoning, usage=turn.usage.model_dump(), finished=turn.finished, **({"extra": turn.extra} if turn.extra else {}))
        if turn.finished and not turn.tool_calls:
            return "agent_finished", final()
        if turn.text is not None:
            last_text = turn.text
        if not turn.tool_calls:
            return "text", last_text
        ended = False
        for call in turn.tool_calls:
            if ended:
                result = ToolResult.failure("not run: an earlier call in this turn ended the step")
            else:
                left = step_deadline - time.monotonic()
                if left <= 0:
                    result = ToolResult.failure("not run: the time for this step is up", timed_out=True)
                elif call.malformed:
                    result = ToolResult.failure(f"malformed call to {call.name!r}: {call.malformed}; send the arguments as one JSON object")
                else:
                    ctx.config = base.model_copy(update={
                        "bash_timeout_s": min(base.bash_timeout_s, left), "bash_max_timeout_s": min(base.bash_max_timeout_s, left),
                        "file_timeout_s": min(base.file_timeout_s, left)})
                    result = call_tool(tools, call, ctx)
                    r.usage.tool_calls += 1
            r.transcript.emit("tool_result", step=index, call_id=call.id, tool=call.name, result=result.model_dump())
            observations.append(Observation(kind="tool_result", text=result.output, call_id=call.id, tool=call.name))
            if result.ends_step and not ended:
                ended = True
                answer = result.answer
        if ended:
            return "submit", final()
        if turn.finished:
            return "agent_finished", final()
        if limits.announce_budget:
            observations.append(Observation(kind="notice", text=_budget_left(r, step_deadline)))


def _time_end(r: _Rollout, step_deadline: float) -> StepEnd:
    return "rollout_time" if step_deadline >= r.deadline else "step_time"


def _budget_exhausted(r: _Rollout) -> StepEnd | None:
    limits, u = r.task.limits, r.usage
    if u.turns >= limits.max_turns:
        return "turn_budget"
    if limits.max_tokens is not None and u.input_tokens + u.output_tokens >= limits.max_tokens:
        return "token_budget"
    if limits.max_cost_usd is not None and u.cost_usd >= limits.max_cost_usd:
        return "cost_budget"
    return None


def _budget_left(r: _Rollout, step_deadline: float) -> str:
    limits, u = r.task.limits, r.usage
    parts = [f"turns left: {limits.max_turns - u.turns}"]
    if limits.max_tokens is not None:
        parts.append(f"tokens left: {max(limits.max_tokens - u.input_tokens - u.output_tokens, 0)}")
    if limits.max_cost_usd is not None:
        parts.append(f"budget left: ${max(limits.max_cost_usd - u.cost_usd, 0):.4f}")
    parts.append(f"time left in this step: {max(step_deadline - time.monotonic(), 0):.0f} s")
    return "; ".join(parts)


def _count(r: _Rollout, turn: AgentTurn) -> None:
    r.usage.turns += 1
    _add_usage(r, turn.usage)


def _add_usage(r: _Rollout, used: TurnUsage) -> None:
    u = r.usage
    u.input_tokens += used.input_tokens
    u.output_tokens += used.output_tokens
    u.cached_tokens += used.cached_tokens
    u.model_calls += used.calls
    u.retries += used.retries
    u.cost_usd += used.cost_usd


def _agent_failed(r: _Rollout, exc: AgentError, index: int | None) -> None:
    if exc.usage is not None:
        _add_usage(r, exc.usage)
    if exc.extra:
        r.transcript.emit("agent_failure", step=index, usage=exc.usage.model_dump() if exc.usage else None, extra=exc.extra)
    if exc.infra:
        r.infra_error("agent", exc)
    else:
        r.transcript.emit("error", where="agent", message=str(exc)[:2000], infra=False, step=index)


def _hook(r: _Rollout, hook: Any, index: int, which: str) -> None:
    """Run a trusted step hook; a failure is the task's (authoring) fault, so infra_error."""
    try:
        hook(StepHookContext(r.box, r.task, index, dict(r.instance.params)))
    except Exception as exc:  # noqa: BLE001
        raise ProctorError(f"step {index} {which} hook failed: {type(exc).__name__}: {exc}") from exc


def _check_network(r: _Rollout, index: int) -> None:
    """Connection attempts to addresses the namespace has no route to (the internet, metadata
    services, other hosts) are blocked by the kernel and counted; a new count is recorded."""
    assert r.box is not None
    counters = r.box.network_counters()
    blocked = counters.get("Ip.OutNoRoutes", 0) + counters.get("Ip6.OutNoRoutes", 0)
    if blocked > r.net_blocked_seen:
        r.flag("network_blocked", f"{blocked - r.net_blocked_seen} packet(s) to unreachable addresses were blocked", index)
        r.net_blocked_seen = blocked


def _forbidden_syscalls(r: _Rollout, index: int) -> None:
    """Syscalls the sandbox's filter refused and recorded (keyrings, fanotify, AF_VSOCK: shared
    kernel state). Read after custody has killed every student process, so none is missed."""
    assert r.box is not None
    for attempt in r.box.syscall_attempts():
        r.flag("forbidden_syscall", attempt.describe(), index)


def _detect(r: _Rollout, index: int) -> None:
    """The detectors of proctor/detectors.py (hidden_path_probe, resource_limit_hit), read at the
    end of the step, before custody kills anything."""
    assert r.box is not None
    for event in step_events(r.box, r.task, index, r.transcript.path, env_dir=r.env_dir, run_dir=r.run_dir):
        r.flag(event.kind, event.detail, index)


def _teardown(r: _Rollout) -> None:
    try:
        r.agent.close()
    except Exception as exc:  # noqa: BLE001
        r.infra_error("agent close", exc)
    if r.box is not None:
        try:
            usage = r.box.usage()
            r.usage.cpu_s = usage.get("cpu_ns", 0) / 1e9
            r.usage.peak_memory_bytes = usage.get("memory_peak_bytes", 0)
            r.usage.oom_kills = usage.get("oom_kills", 0)
            r.usage.pids_limit_hits = usage.get("pids_limit_hits", 0)
        except OSError:
            pass
        try:
            r.box.close()
        except ProctorError as exc:
            r.infra_error("teardown", exc)


def _result(r: _Rollout, run_id: str, started_at: str, ended_by: StepEnd | None) -> RolloutResult:
    task = r.task
    for index in range(len(r.steps), len(task.steps)):
        r.steps.append(StepResult(index=index, score=0.0, weight=task.steps[index].weight, ended_by="not_reached", explanation="not reached"))
    total = sum(s.weight for s in r.steps)
    score = sum(s.score * s.weight for s in r.steps) / total if total else 0.0
    counted = [m for m in r.misbehaviour if m.kind not in r.config.ignore_misbehaviour]
    judged = min(max(score, 0.0), 1.0)
    if counted:
        status, reward, score = "misbehaved", -r.config.misbehaviour_penalty, 0.0
    elif r.infra:
        status, reward = "infra_error", 0.0
    else:
        status, reward = "completed", score
    timings = Timings(started_at=started_at, total_s=time.monotonic() - r.started, **r.timings)
    return RolloutResult(
        run_id=run_id, task_id=task.id, instance=r.instance, agent=r.agent.name, status=status,
        score=min(max(score, 0.0), 1.0), judged_score=judged, reward=reward, steps=r.steps, misbehaviour=r.misbehaviour, errors=r.errors,
        confinement=r.confinement, usage=r.usage, timings=timings, ended_by=ended_by,
    )


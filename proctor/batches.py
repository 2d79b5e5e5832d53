"""A batch of rollouts in one `--out`, recorded so that an interrupted batch can be finished exactly.

`proctor run ENV --task T -n N --out OUT` is one batch. Before its first rollout starts, the batch's
record is written (atomically) to `OUT/.batches/<batch_id>.json`: everything that makes two
invocations the same batch (environment, task or family, agent and the content of a script agent's
file, model config, `-n`, seed, difficulty, parameters, rollout config, the instance key's
fingerprint for a family). Rollout `i` of the batch is seed `seed+i` of a family (the task itself
for a task), and its run id is `<task_id>-<batch_id>-<i>`: the same rollout gets the same run id in
every invocation, so a resumed batch never holds one rollout twice.

`--resume` picks the batch in OUT whose record matches the command and takes its lock (an flock the
kernel drops when its holder dies, even by `kill -9`; a batch still running elsewhere is refused).
A rollout whose directory holds a whole, valid result.json of that rollout is kept. Any other
directory of the batch (no result.json: the harness died mid-rollout; an unreadable one; an
`infra_error` or `abandoned` result, which a trainer masks anyway) is moved, whole, to
`OUT/.superseded/` with a line in `OUT/.superseded/log.jsonl` saying why, and the rollout is run
again under its run id. Nothing is deleted."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .agents.model_config import ModelConfig
from .episode import RolloutConfig
from .errors import ConfigError
from .results import RolloutResult, read_result, write_atomically
from .sandbox.locks import try_lock
from .tasks import salts
from .tasks.loading import Environment

RECORDS = ".batches"
SUPERSEDED = ".superseded"
# Statuses a resume reruns: a trainer masks both, so a batch is only whole without them.
RERUN = ("infra_error", "abandoned")


class BatchSpec(BaseModel):
    """What makes two invocations the same batch: equal specs run the same rollout at each index."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    environment: str = Field(description="The environment's directory (resolved), or its module name.")
    task: str = Field(description="The task or family id given.")
    agent: str = Field(description="The agent spec; a script agent's path resolved.")
    agent_file_sha256: str | None = Field(None, description="SHA-256 of a script agent's file when the batch began.")
    model: dict[str, Any] | None = Field(None, description="The model config of `--agent model:NAME` (never a key).")
    n: int = Field(ge=1)
    seed: int | None = Field(None, description="A family's first seed; None for a task.")
    difficulty: int | None = Field(None, description="A family's difficulty (its first when not given); None for a task.")
    params: dict[str, Any] = Field(default_factory=dict, description="A family's parameters, defaults filled in.")
    rollout: dict[str, Any] = Field(description="The RolloutConfig (penalty, runtime, allow_degraded...).")
    instance_key: str | None = Field(None, description="A family's instance-key fingerprint: another key makes other instances.")
    impossible: bool = Field(False, description="Every rollout runs the impossible variant (`--impossible`).")


class BatchRecord(BaseModel):
    """`OUT/.batches/<batch_id>.json`, written before the batch's first rollout starts."""

    model_config = ConfigDict(extra="forbid")

    batch_id: str
    created_at: str = Field(description="ISO 8601 UTC.")
    spec: BatchSpec


def batch_spec(env: Environment, ident: str, agent: str, *, n: int, seed: int, difficulty: int | None,
               params: dict[str, Any] | None, config: RolloutConfig, model: ModelConfig | None,
               impossible: bool = False) -> BatchSpec:
    """The spec of a batch, normalised so that spelling the same thing two ways (a relative path, a
    family's default difficulty given or left out) is the same batch."""
    kind, _, arg = agent.partition(":")
    digest = None
    if kind == "script" and arg:
        path = Path(arg).resolve()
        agent = f"script:{path}"
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            raise ConfigError(f"{arg}: cannot read the script file ({exc.strerror})") from None
    family = env.families.get(ident)
    return BatchSpec(
        environment=str(Path(env.directory).resolve()) if env.directory else env.name,
        task=ident, agent=agent, agent_file_sha256=digest,
        model=model.model_dump(mode="json") if model is not None else None, n=n,
        seed=seed if family else None,
        difficulty=(family.difficulties[0] if difficulty is None else difficulty) if family else None,
        params={**family.default_params, **(params or {})} if family else {},
        rollout=config.model_dump(mode="json"),
        instance_key=salts.key_fingerprint() if family else None, impossible=impossible,
    )


@dataclass
class Superseded:
    """A directory of the batch moved aside by a resume, and why."""

    index: int
    run_id: str
    moved_to: Path
    kind: str  # "without result.json", "infra_error"...: what the summary line counts
    detail: str = ""


@dataclass
class BatchPlan:
    """An open batch: its record, what an earlier run finished, and what is left to run. Holds the
    batch's lock until closed."""

    out_dir: Path
    record: BatchRecord
    resumed: bool = False
    finished: dict[int, RolloutResult] = field(default_factory=dict)
    superseded: list[Superseded] = field(default_factory=list)
    _lock_fd: int | None = None

    @property
    def n(self) -> int:
        return self.record.spec.n

    @property
    def todo(self) -> list[int]:
        return [i for i in range(self.n) if i not in self.finished]

    def run_id(self, task_id: str, index: int) -> str:
        return f"{task_id}-{self.record.batch_id}-{index:0{_width(self.n)}d}"

    def index_of(self, name: str) -> int | None:
        """The index of a run directory's name in this batch, or None if it is not one of its rollouts."""
        match = re.fullmatch(rf".+-{re.escape(self.record.batch_id)}-(\d{{{_width(self.n)}}})", name)
        return int(match.group(1)) if match and int(match.group(1)) < self.n else None

    def describe(self) -> str:
        """One line on what a resume found, for the person who ran it."""
        if not self.resumed:
            return f"batch {self.record.batch_id}: {self.n} rollout(s)"
        line = f"resuming batch {self.record.batch_id}: {len(self.finished)} of {self.n} already finished, {len(self.todo)} to run"
        if self.superseded:
            kinds: dict[str, int] = {}
            for moved in self.superseded:
                kinds[moved.kind] = kinds.get(moved.kind, 0) + 1
            why = ", ".join(f"{count} {kind}" for kind, count in kinds.items())
            line += f"; moved {len(self.superseded)} aside to {self.out_dir / SUPERSEDED} ({why})"
        return line

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _width(n: int) -> int:
    return len(str(max(n - 1, 0)))


@contextmanager
def open_batch(out_dir: str | Path, spec: BatchSpec, *, resume: bool = False) -> Iterator[BatchPlan]:
    """A new batch in `out_dir`, or with `resume` the batch there that `spec` matches, inventoried
    (finished rollouts kept, the rest moved aside). `resume` on an OUT holding no batch at all
    starts one, so a preempted job can rerun the same command; a mismatch is a ConfigError naming
    the difference."""
    out = Path(out_dir)
    plan = _resume(out, spec) if resume else None
    if plan is None:
        plan = _start(out, spec)
    try:
        yield plan
    finally:
        plan.close()


def _records_dir(out: Path) -> Path:
    try:
        path = out / RECORDS
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{out}: cannot create the batch's directory ({exc.strerror})") from None
    return path


def _start(out: Path, spec: BatchSpec) -> BatchPlan:
    records = _records_dir(out)
    now = datetime.now(timezone.utc)
    record = BatchRecord(batch_id=f"{now.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}",
                         created_at=now.isoformat(timespec="seconds"), spec=spec)
    # Locked before the record exists: a resume that finds the record finds it held.
    fd = try_lock(records / f"{record.batch_id}.lock")
    if fd is None:  # a fresh random id: only a clash of 32 random bits gets here
        raise ConfigError(f"{records}: batch id {record.batch_id} is taken; run again")
    plan = BatchPlan(out_dir=out, record=record, _lock_fd=fd)
    try:
        write_atomically(records / f"{record.batch_id}.json", record.model_dump_json(indent=2) + "\n")
    except OSError as exc:
        plan.close()
        raise ConfigError(f"{records}: cannot write the batch record ({exc.strerror})") from None
    return plan


def _read_records(out: Path) -> list[BatchRecord]:
    records = []
    for path in sorted((out / RECORDS).glob("*.json")) if (out / RECORDS).is_dir() else []:
        try:
            records.append(BatchRecord.model_validate_json(path.read_bytes()))
        except (OSError, ValidationError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else f"{exc.error_count()} invalid field(s)"
            raise ConfigError(f"{path}: unreadable batch record ({reason}); move it away to resume the others") from None
    return records


def _resume(out: Path, spec: BatchSpec) -> BatchPlan | None:
    records = _read_records(out)
    if not records:
        if out.is_dir() and any(not p.name.startswith(".") for p in out.iterdir()):
            raise ConfigError(f"--resume: {out} holds results but no batch record ({RECORDS}/), so nothing says which rollouts "
                              "they are; run without --resume to add a new batch there, or use another --out")
        return None
    matching = sorted((r for r in records if r.spec == spec), key=lambda r: (r.created_at, r.batch_id))
    if not matching:
        newest_first = sorted(records, key=lambda r: (r.created_at, r.batch_id), reverse=True)
        closest = min(newest_first, key=lambda r: len(_differences(r.spec, spec)))
        raise ConfigError(f"--resume: {out}'s batch {closest.batch_id} was run with other arguments: "
                          f"{'; '.join(_differences(closest.spec, spec))} (run without --resume, or into another --out, for a new batch)")
    record = matching[-1]
    fd = try_lock(out / RECORDS / f"{record.batch_id}.lock")
    if fd is None:
        raise ConfigError(f"--resume: batch {record.batch_id} in {out} is still running (another proctor run holds "
                          f"{out / RECORDS / record.batch_id}.lock); wait for it or stop it first")
    plan = BatchPlan(out_dir=out, record=record, resumed=True, _lock_fd=fd)
    try:
        _inventory(plan)
    except BaseException:
        plan.close()
        raise
    return plan


def _inventory(plan: BatchPlan) -> None:
    """Keep each rollout with a whole result of its own; move every other directory of the batch aside."""
    for entry in sorted(plan.out_dir.iterdir(), key=lambda p: p.name):
        index = plan.index_of(entry.name)
        if index is None or not entry.is_dir() or entry.is_symlink():
            continue
        result, kind, detail = _finished(plan, entry, index)
        if result is not None and index in plan.finished:
            result, kind, detail = None, "duplicate", f"rollout {index} already has a result in {plan.finished[index].run_id}"
        if result is not None:
            plan.finished[index] = result
        else:
            _move_aside(plan, entry, index, kind, detail)


def _finished(plan: BatchPlan, directory: Path, index: int) -> tuple[RolloutResult | None, str, str]:
    """(the rollout's result, "", "") if it is whole and really this rollout's; else (None, kind, detail)."""
    path = directory / "result.json"
    if not path.exists():
        return None, "without result.json", "the harness stopped mid-rollout"
    try:
        result = read_result(path)
    except (OSError, ValueError) as exc:
        return None, "with an unreadable result.json", " ".join(str(exc).split())[:300]
    spec = plan.record.spec
    if result.run_id != directory.name:
        return None, "with another run's result.json", f"its run_id is {result.run_id}"
    if spec.seed is not None and (result.instance.family, result.instance.seed) != (spec.task, spec.seed + index):
        return None, "with another instance's result.json", f"family {result.instance.family}, seed {result.instance.seed}"
    if spec.seed is None and result.task_id != spec.task:
        return None, "with another task's result.json", f"task {result.task_id}"
    if result.status in RERUN:
        return None, result.status, "; ".join(result.errors)[:300]
    return result, "", ""


def _move_aside(plan: BatchPlan, directory: Path, index: int, kind: str, detail: str) -> None:
    aside = plan.out_dir / SUPERSEDED
    aside.mkdir(mode=0o700, exist_ok=True)
    target, k = aside / directory.name, 1
    while target.exists():  # the same rollout superseded by an earlier resume too
        target, k = aside / f"{directory.name}.{k}", k + 1
    try:
        os.rename(directory, target)
    except OSError as exc:
        raise ConfigError(f"--resume: cannot move {directory} aside to {target} ({exc.strerror}); nothing was rerun") from None
    moved = Superseded(index=index, run_id=directory.name, moved_to=target, kind=kind, detail=detail)
    plan.superseded.append(moved)
    line = {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "batch_id": plan.record.batch_id,
            "index": index, "run_id": moved.run_id, "moved_to": str(target), "kind": kind, "detail": detail}
    with open(aside / "log.jsonl", "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")


# -- naming a difference ---------------------------------------------------------------------------
_LABELS = {
    "environment": "ENV", "task": "--task", "agent": "--agent", "n": "-n", "seed": "--seed", "difficulty": "--difficulty",
    "rollout.misbehaviour_penalty": "--penalty", "rollout.allow_degraded": "--allow-degraded", "rollout.runtime": "--runtime",
    "instance_key": "the instance key (fingerprint)",
}


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"a.b": leaf}; an empty dict has no leaves (no --param at all reads as each one unset)."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}.{key}" if prefix else key).items()}
    return {prefix: value}


def _label(key: str) -> str:
    if key in _LABELS:
        return _LABELS[key]
    head, _, rest = key.partition(".")
    return {"params": f"--param {rest}", "model": f"the model config's {rest}",
            "rollout": f"the rollout config's {rest}"}.get(head, key)


def _shown(value: Any) -> str:
    """A value for the one-line error: a path or name whole, a long list or object cut."""
    text, cap = (value, 500) if isinstance(value, str) else (json.dumps(value), 120)
    return text if len(text) <= cap else text[: cap - 3] + "..."


def _differences(was: BatchSpec, now: BatchSpec) -> list[str]:
    """Each difference as `FLAG was A, now B`, in the order of the command's options."""
    if was.agent_file_sha256 != now.agent_file_sha256 and was.agent == now.agent:
        changed = [f"the script file {was.agent.partition(':')[2]} has changed since the batch began"]
    else:
        changed = []
    old, new = (_flat(s.model_dump(exclude={"agent_file_sha256"})) for s in (was, now))
    for key in [*old, *(k for k in new if k not in old)]:
        if old.get(key, "unset") != new.get(key, "unset"):
            changed.append(f"{_label(key)} was {_shown(old.get(key, 'unset'))}, now {_shown(new.get(key, 'unset'))}")
    return changed

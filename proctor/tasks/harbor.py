"""Harbor and old-layout Terminal-Bench task directories as Proctor tasks.

Harbor (Terminal-Bench 2.x): `task.toml`, `instruction.md`, `environment/Dockerfile`,
`tests/test.sh` + `tests/test_*.py`, `solution/solve.sh`. Old Terminal-Bench: `task.yaml`,
`Dockerfile` (and `docker-compose.yaml`), `run-tests.sh`, `tests/`, `solution.sh`.

Each field maps faithfully or is named in a note (downgraded) or in the error (refused); nothing is
silently dropped:
- the instruction is the step's instructions; the whole workdir is the submission;
- the tests are graded by `PytestJudge` (tests at /tests, Harbor's all-pass rule); `test.sh` /
  `run-tests.sh` is not run (it installs pytest or downloads tools at grading time, and trusts an
  exit status the student's code can set): a note says so;
- the solution script is the oracle, run as the student;
- agent/verifier timeouts, cpus, memory and storage become limits; metadata becomes tags;
- the Dockerfile: a task runs on this machine's root, with no build, when its Dockerfile needs
  nothing the root lacks: `FROM` (noted: the image is not used), `WORKDIR` (the task's workdir),
  harmless `ENV`s, `RUN` of `apt-get install` / `pip install` of packages already installed (pip
  ones checked before each rollout as `Task.packages`) or `mkdir`, and one `COPY` of a context
  directory into the workdir (its `workdir_files`). Otherwise it runs over its image
  (`Task.image`, built from the Dockerfile; the workdir starts with the image's files there), and a
  note names the first line the root could not stand in for. A prebuilt `docker_image` is used as
  it is. A COPY of the task's tests or solution into the image is refused;
- internet access is downgraded (the sandbox has none; noted); GPUs, TPUs, extra services
  (a compose file with more than one service) and environment variables
  for the agent or verifier are refused, naming the field."""

from __future__ import annotations

import math
import os
import re
import shlex
import stat
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..agents.script import Script
from ..errors import ConfigError
from ..images.models import TaskImage
from ..judges.pytest_judge import PytestJudge
from ..sandbox.models import MiB, SandboxLimits
from .models import Limits, Step, Task
from .packages import missing_packages

DEFAULT_WORKDIR = "/app"
# ENV lines that change nothing a task's result depends on.
_HARMLESS_ENV = {"DEBIAN_FRONTEND", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PIP_NO_CACHE_DIR", "PIP_DISABLE_PIP_VERSION_CHECK",
                 "LANG", "LC_ALL", "TERM", "TZ"}
_NOTED_INSTRUCTIONS = {"LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "SHELL", "MAINTAINER", "ARG", "HEALTHCHECK", "STOPSIGNAL", "ONBUILD"}
_KNOWN_ENVIRONMENT = {"build_timeout_sec", "cpus", "memory", "memory_mb", "storage", "storage_mb", "gpus", "gpu_types", "tpu",
                      "allow_internet", "docker_image", "env", "os"}
# Harbor's task.toml: its top-level tables and the keys of each ([metadata] is free-form: tags).
_KNOWN_HARBOR = {"version": None, "metadata": None, "environment": None, "agent": {"timeout_sec", "env"},
                 "verifier": {"timeout_sec", "env"}, "solution": {"env"}, "source": None}
# The old layout's task.yaml keys: read, or harmless to leave (authorship, estimates, recording).
_KNOWN_TERMINAL_BENCH = {"instruction", "descriptions", "author_name", "author_email", "difficulty", "category", "tags",
                         "parser_name", "max_agent_timeout_sec", "max_test_timeout_sec", "run_tests_in_same_shell",
                         "disable_asciinema", "estimated_duration_sec", "expert_time_estimate_min", "junior_time_estimate_min"}


@dataclass
class ImportedTask:
    """A task built from a task directory, and what was downgraded on the way (one line each)."""

    task: Task
    layout: str
    notes: list[str] = field(default_factory=list)


def layout(path: str | Path) -> str | None:
    """"harbor", "terminal-bench" (the old layout), or None for anything else."""
    p = Path(path)
    if (p / "task.toml").is_file() and (p / "instruction.md").is_file():
        return "harbor"
    if (p / "task.yaml").is_file() and ((p / "run-tests.sh").is_file() or (p / "tests").is_dir()):
        return "terminal-bench"
    return None


ImageMode = Literal["auto", "always"]


def import_task(path: str | Path, image: ImageMode = "auto") -> ImportedTask:
    """The task of a Harbor or old Terminal-Bench directory; ConfigError naming the field that
    cannot be honoured. `image`: "auto" runs the task on this machine's root when its Dockerfile
    needs nothing the root lacks, else over its image; "always" over its image whenever it has a
    Dockerfile (faithful to the image's own tools and Python, at the cost of a build)."""
    if image not in ("auto", "always"):
        raise ConfigError(f"image {image!r}: must be auto or always")
    root = Path(path).resolve()
    if (root / "task.toml").is_file() and (root / "task.yaml").is_file():
        raise ConfigError(f"{root}: holds both task.toml (Harbor) and task.yaml (old Terminal-Bench); which one describes the task "
                          "is ambiguous, so remove the other")
    kind = layout(root)
    if kind is None:
        raise ConfigError(f"{root}: not a Harbor task (task.toml + instruction.md) or an old Terminal-Bench task (task.yaml + run-tests.sh or tests/)")
    _check_tree(root)
    return _harbor(root, image) if kind == "harbor" else _terminal_bench(root, image)


def _check_tree(root: Path) -> None:
    """Refuse a task directory holding a link out of it (the harness reads its files as root, and
    the judge copies its tests) or a special file (a FIFO would hang a read)."""
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                target = path.resolve()
                if not target.is_relative_to(root):
                    raise ConfigError(f"{path}: a symlink out of the task directory (to {target}); copy the file into the task instead")
            elif not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                raise ConfigError(f"{path}: not a regular file or directory (a FIFO, socket or device); a task holds files only")


_MAX_TEXT = 1 << 20  # instructions, configs and scripts are read whole: a larger one is a mistake


def _text(path: Path) -> str:
    """A task's text file, UTF-8 and at most 1 MiB, or a ConfigError naming it."""
    if path.stat().st_size > _MAX_TEXT:
        raise ConfigError(f"{path}: {path.stat().st_size} bytes; a task's text files are at most {_MAX_TEXT} bytes")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def load_task(path: str | Path, image: ImageMode = "auto") -> Task:
    return import_task(path, image).task


# -- Harbor -------------------------------------------------------------------------------------------
def _harbor(root: Path, mode: ImageMode = "auto") -> ImportedTask:
    where = root / "task.toml"
    try:
        config = tomllib.loads(_text(where))
    except (tomllib.TOMLDecodeError, UnicodeError) as exc:
        raise ConfigError(f"{where}: not valid TOML: {exc}") from None
    notes: list[str] = []
    for key in sorted(config):
        if key not in _KNOWN_HARBOR:
            raise ConfigError(f"{where}: [{key}]: not a section Proctor knows; refusing rather than ignoring it")
        allowed = _KNOWN_HARBOR[key]
        if allowed is not None:
            extra = sorted(set(_table(config, key, where)) - allowed)
            if extra:
                raise ConfigError(f"{where}: [{key}] {', '.join(extra)}: not a field Proctor knows; refusing rather than ignoring it")
    if _table(config, "solution", where).get("env"):
        raise ConfigError(f"{where}: [solution] env: environment variables for the solution cannot be set in Proctor's sandbox yet; refusing the task")
    env = _table(config, "environment", where)
    unknown = sorted(set(env) - _KNOWN_ENVIRONMENT)
    if unknown:
        raise ConfigError(f"{where}: [environment] {', '.join(unknown)}: not a field Proctor knows; refusing rather than ignoring it")
    _refuse_unhonourable(env, where, "environment", notes)
    for section in ("agent", "verifier"):
        if _table(config, section, where).get("env"):
            raise ConfigError(f"{where}: [{section}] env: environment variables for the {section} cannot be set in Proctor's sandbox yet; refusing the task")
    if env.get("env"):
        raise ConfigError(f"{where}: [environment] env: environment variables cannot be set in Proctor's sandbox yet; refusing the task")
    docker_image = env.get("docker_image")
    if docker_image is not None and (not isinstance(docker_image, str) or not docker_image.strip()):
        raise ConfigError(f"{where}: [environment] docker_image {docker_image!r}: must be an image reference")
    compose = root / "environment" / "docker-compose.yaml"
    if compose.exists() or (root / "environment" / "docker-compose.yml").exists():
        raise ConfigError(f"{root / 'environment'}: docker-compose: extra services cannot run beside Proctor's sandbox; refusing the task")
    image = _environment(root / "environment" / "Dockerfile", root / "environment", notes, mode, docker_image=docker_image,
                         keep_out=(root / "tests", root / "solution"))
    limits = _limits(cpus=env.get("cpus"), memory=_mib(env, "memory", where), storage=_mib(env, "storage", where),
                     agent_s=_table(config, "agent", where).get("timeout_sec"), where=where)
    verifier_s = _seconds(_table(config, "verifier", where).get("timeout_sec", 600.0), where, "[verifier] timeout_sec")
    metadata = _table(config, "metadata", where)
    instruction = _text(root / "instruction.md")
    solve = root / "solution" / "solve.sh"
    oracle = _oracle(solve, root / "solution", image.workdir, limits) if solve.is_file() else None
    if oracle is None:
        notes.append("solution/solve.sh: absent, so the task has no oracle")
    return ImportedTask(task=_task(root, instruction, metadata, image, limits, verifier_s, oracle, notes, "tests/test.sh"),
                        layout="harbor", notes=notes)


def _seconds(value: Any, where: Path, field: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= 7 * 86400):
        raise ConfigError(f"{where}: {field} {value!r}: not a number of seconds between 0 and a week")
    return seconds


def _table(config: dict[str, Any], name: str, where: Path) -> dict[str, Any]:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: [{name}] must be a table")
    return value


def _refuse_unhonourable(env: dict[str, Any], where: Path, section: str, notes: list[str]) -> None:
    if env.get("gpus"):
        raise ConfigError(f"{where}: [{section}] gpus = {env['gpus']}: Proctor's imported tasks cannot get GPUs; refusing the task")
    if env.get("tpu"):
        raise ConfigError(f"{where}: [{section}] tpu: Proctor cannot give TPUs; refusing the task")
    if env.get("os") not in (None, "linux"):
        raise ConfigError(f"{where}: [{section}] os = {env['os']!r}: only linux tasks run here")
    if env.get("allow_internet"):
        notes.append(f"{where.name}: [{section}] allow_internet = true: downgraded, the sandbox has no internet access")


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


def _mib(env: dict[str, Any], name: str, where: Path) -> float | None:
    if env.get(f"{name}_mb") is not None:
        return float(env[f"{name}_mb"])
    if env.get(name) is None:
        return None
    match = _SIZE.match(str(env[name]))
    if not match:
        raise ConfigError(f"{where}: [environment] {name} = {env[name]!r}: not a size such as '4G' or '512M'")
    scale = {"": 1 / MiB, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[match.group(2).upper()]
    return float(match.group(1)) * scale


def _limits(*, cpus: Any, memory: float | None, storage: float | None, agent_s: Any, where: Path) -> Limits:
    sandbox: dict[str, Any] = {}
    try:
        if cpus is not None:
            sandbox["cpus"] = float(cpus)
        if memory is not None:
            sandbox["memory_bytes"] = int(memory * MiB)
        if storage is not None:
            sandbox["workdir_bytes"] = int(storage * MiB)
        agent = float(agent_s) if agent_s is not None else 1800.0
        if not math.isfinite(agent) or agent > 7 * 86400:
            raise ValueError(f"timeout_sec {agent_s!r} is not a number of seconds up to a week")
        return Limits(sandbox=SandboxLimits(**sandbox), step_time_s=agent, rollout_time_s=agent,
                      max_command_timeout_s=agent, command_timeout_s=min(120.0, agent))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: the limits do not fit Proctor's sandbox: {' '.join(str(exc).split())}") from None


# -- the Dockerfile -----------------------------------------------------------------------------------
@dataclass
class _Image:
    base: str | None = None
    workdir: str = DEFAULT_WORKDIR
    workdir_files: Path | None = None
    packages: list[str] = field(default_factory=list)
    image: TaskImage | None = None  # None: the task runs on this machine's root


def _dockerfile(path: Path, context: Path, notes: list[str]) -> _Image:
    image = _Image()
    if not path.is_file():
        notes.append(f"{path.name}: absent; the task runs on this machine's root with workdir {DEFAULT_WORKDIR}")
        return image
    saw_workdir = False
    for number, line in _instructions(path):
        word, _, rest = line.partition(" ")
        word, rest = word.upper(), rest.strip()
        here = f"{path}:{number} `{_short(line)}`"
        if word == "FROM":
            image.base = rest.split()[0] if rest else "?"
        elif word == "WORKDIR":
            image.workdir, saw_workdir = _next_workdir(image.workdir if saw_workdir else "/", rest, here), True
        elif word == "ENV":
            names = [part.split("=", 1)[0] for part in shlex.split(rest)] if "=" in rest else rest.split()[:1]
            if any(n not in _HARMLESS_ENV for n in names):
                raise _NeedsImage(f"{here}: ENV {', '.join(names)} changes the environment")
            notes.append(f"{path.name}:{number}: ENV {', '.join(names)} not applied (does not change a result)")
        elif word == "RUN":
            image.packages += _run(rest, here, image)
        elif word in ("COPY", "ADD"):
            _copy(rest, here, context, image)
        elif word == "USER":
            notes.append(f"{path.name}:{number}: USER {rest} not applied: the student is always its own unprivileged user")
        elif word in _NOTED_INSTRUCTIONS:
            notes.append(f"{path.name}:{number}: {word} not applied (no effect on a rollout)")
        else:
            raise _NeedsImage(f"{here}: {word} changes the image")
    missing = missing_packages(image.packages)
    if missing:
        raise _NeedsImage(f"{path}: pip-installs {', '.join(missing)}, which the student runtime lacks")
    if not saw_workdir:
        notes.append(f"{path.name}: no WORKDIR; the workdir is {DEFAULT_WORKDIR}")
    notes.append(f"{path.name}: FROM {image.base}: its image is not built, the task runs on this machine's root "
                 f"(its Dockerfile installs nothing the root lacks)")
    return image


class _NeedsImage(ConfigError):
    """A Dockerfile line this machine's root does not already satisfy: the task runs over its image."""


def _environment(dockerfile: Path, context: Path, notes: list[str], mode: ImageMode, *, docker_image: str | None = None,
                 keep_out: tuple[Path, ...] = ()) -> _Image:
    """How the task's environment is made: on this machine's root when its Dockerfile needs
    nothing the root lacks (no build: fast, and nothing to pull), else over its image, built from
    the Dockerfile with buildah; a prebuilt `docker_image` is used as it is."""
    if docker_image:
        workdir = _image_workdir(dockerfile) if dockerfile.is_file() else DEFAULT_WORKDIR
        notes.append(f"docker_image {docker_image}: the task runs over that image (from the local store, or pulled)"
                     + (f"; {dockerfile.name} is not built" if dockerfile.is_file() else "") + f"; the workdir is {workdir}")
        return _Image(base=docker_image, workdir=workdir, image=TaskImage(ref=docker_image))
    if dockerfile.is_file() and not any(line.partition(" ")[0].upper() == "FROM" for _, line in _instructions(dockerfile)):
        raise ConfigError(f"{dockerfile}: no FROM line: not a Dockerfile Proctor can read")
    # What the build must never see: the task's tests and solution where they share the context.
    secret = tuple(str(p.relative_to(context)) for p in keep_out if p.exists() and p.resolve().is_relative_to(context.resolve()))
    covering = _keep_out_of_the_image(dockerfile, context, keep_out) if dockerfile.is_file() else None
    if covering is not None:
        return _over_image(dockerfile, context, notes, f"{covering}: copies the task directory (on this machine's root the "
                           "tests and solution would be in the workdir)", secret)
    if mode == "always" and dockerfile.is_file():
        return _over_image(dockerfile, context, notes, f"{dockerfile.name}: image always (asked for)", secret)
    host_notes: list[str] = []
    try:
        image = _dockerfile(dockerfile, context, host_notes)
    except _NeedsImage as exc:
        return _over_image(dockerfile, context, notes, str(exc), secret)
    notes += host_notes
    return image


def _over_image(dockerfile: Path, context: Path, notes: list[str], reason: str, secret: tuple[str, ...]) -> _Image:
    image = _Image(workdir=_image_workdir(dockerfile),
                   image=TaskImage(context=context.resolve(), dockerfile=dockerfile.resolve(), exclude=secret))
    for number, line in _instructions(dockerfile):
        word, _, rest = line.partition(" ")
        word, rest = word.upper(), rest.strip()
        if word == "FROM" and image.base is None:
            image.base = rest.split()[0] if rest else "?"
        elif word == "USER":
            notes.append(f"{dockerfile.name}:{number}: USER {rest} not applied: the student is always its own unprivileged user")
    left_out = f"; {', '.join(secret)} left out of its build context" if secret else ""
    notes.append(f"{reason}: the task runs over its image, built from {dockerfile} with buildah at its first rollout "
                 f"(FROM {image.base}: from the local store, or pulled){left_out}; the workdir {image.workdir} starts with the image's files there")
    return image


def _image_workdir(dockerfile: Path) -> str:
    """The Dockerfile's last WORKDIR (a relative one taken from the one before, or from /, as
    Docker does), or /app when it has none."""
    workdir: str | None = None
    for number, line in _instructions(dockerfile):
        word, _, rest = line.partition(" ")
        if word.upper() == "WORKDIR":
            workdir = _next_workdir(workdir or "/", rest.strip(), f"{dockerfile}:{number} `{_short(line)}`")
    return workdir or DEFAULT_WORKDIR


def _next_workdir(current: str, rest: str, here: str) -> str:
    if "$" in rest or not rest:
        raise ConfigError(f"{here}: a WORKDIR made from variables cannot be read before the build; write the path out")
    return os.path.normpath(os.path.join(current, rest))


def _sources(rest: str, context: Path) -> tuple[list[list[Path]], str] | None:
    """The context paths each source of a COPY/ADD names (globs expanded), and its destination."""
    words = [w for w in shlex.split(rest) if not w.startswith("--")]
    if len(words) < 2:
        return None
    base = context.resolve()
    *sources, dest = words
    return [[p.resolve() for p in base.glob(src)] if any(c in src for c in "*?[") else [(base / src).resolve()] for src in sources], dest


def _keep_out_of_the_image(dockerfile: Path, context: Path, keep_out: tuple[Path, ...]) -> str | None:
    """Refuses a COPY/ADD that names the task's tests or solution (or a path inside them): the
    student would read the answer key. Returns the first line copying a directory that holds them
    (`COPY . /app` in an old-layout task), which only an image build can honour, with them left out."""
    covering: str | None = None
    for number, line in _instructions(dockerfile):
        word, _, rest = line.partition(" ")
        if word.upper() not in ("COPY", "ADD") or "--from" in rest:
            continue
        parsed = _sources(rest.strip(), context)
        for src in (p for group in (parsed[0] if parsed else []) for p in group):
            for secret in keep_out:
                secret = secret.resolve()
                if secret == src or src.is_relative_to(secret):
                    raise ConfigError(f"{dockerfile}:{number} `{_short(line)}`: copies {secret.name} into the student's world; "
                                      "the task's tests and solution must stay out of it (copy only the files the student needs)")
                if secret.is_relative_to(src) and covering is None:
                    covering = f"{dockerfile}:{number} `{_short(line)}`"
    return covering


def _instructions(path: Path) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, (pending + line).strip()))
        pending = ""
    if pending:
        out.append((start, pending.strip()))
    return out


def _short(line: str) -> str:
    return line if len(line) <= 100 else line[:97] + "..."


def _run(command: str, here: str, image: _Image) -> list[str]:
    """The pip packages a RUN installs (to be checked per rollout); refuses anything that would
    change the root."""
    packages: list[str] = []
    for part in re.split(r"\s*(?:&&|;)\s*", command.strip()):
        words = shlex.split(part) if part else []
        while words and words[0] in ("sudo", "env"):
            words = words[1:]
        if not words or words[0] in ("true", ":"):
            continue
        if words[0] in ("apt-get", "apt") and len(words) > 1 and words[1] in ("update", "clean", "autoclean"):
            continue
        if words[0] == "rm" and any(w.startswith("/var/lib/apt/lists") for w in words):
            continue
        if words[0] == "mkdir":
            continue  # the workdir and what the student makes under it need no image
        if words[0] in ("apt-get", "apt") and "install" in words:
            wanted = [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
            missing = [w for w in wanted if not _deb_installed(w)]
            if missing:
                raise _NeedsImage(f"{here}: installs {', '.join(missing)}, which this machine's root lacks")
            continue
        pip = _pip_install(words)
        if pip is not None:
            packages += pip
            continue
        raise _NeedsImage(f"{here}: changes the image")
    return packages


def _pip_install(words: list[str]) -> list[str] | None:
    if words[:2] in (["pip", "install"], ["pip3", "install"], ["uv", "pip"]) or words[:4] in (["python", "-m", "pip", "install"], ["python3", "-m", "pip", "install"]):
        tail = words[words.index("install") + 1:] if "install" in words else []
        if any(w in ("-r", "--requirement", "-e", "--editable") for w in tail):
            return None
        return [re.split(r"[<>=!~\[; ]", w, maxsplit=1)[0] for w in tail if not w.startswith("-")]
    return None


def _deb_installed(name: str) -> bool:
    name = re.split(r"[=:]", name, maxsplit=1)[0]
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip().endswith("installed") and "not-installed" not in out.stdout


def _copy(rest: str, here: str, context: Path, image: _Image) -> None:
    words = [w for w in shlex.split(rest) if not w.startswith("--")]
    if len(words) != 2:
        raise _NeedsImage(f"{here}: copies into the image")
    source, dest = words
    dest = dest.rstrip("/") or "/"
    into_workdir = dest in (".", image.workdir) or (not dest.startswith("/") and dest in ("./",))
    src = (context / source).resolve()
    if not into_workdir or not src.is_dir() or not src.is_relative_to(context.resolve()):
        raise _NeedsImage(f"{here}: copies into the image")
    if image.workdir_files is not None:
        raise _NeedsImage(f"{here}: a second COPY into the workdir")
    image.workdir_files = src


def _grading_installs(script: Path) -> list[str]:
    """The packages a test.sh installs at grading time: `pip install X`, `uv pip install X`,
    `uv add X`, `uvx --with X` / `-w X` (best effort, for a note; the script is never run)."""
    found: list[str] = []
    try:
        text = script.read_text(errors="replace")
    except OSError:
        return found
    for line in text.replace("\\\n", " ").splitlines():
        for part in re.split(r"\s*(?:&&|;|\|\|)\s*", line.split("#", 1)[0]):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            pip = _pip_install(words)
            if pip is not None:
                found += pip
            elif words[:2] == ["uv", "add"]:
                found += [w for w in words[2:] if not w.startswith("-")]
            if words and words[0] in ("uvx", "uv"):
                found += [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--with", "-w")]
    names = [re.split(r"[<>=!~\[; ]", w, maxsplit=1)[0] for w in found]
    return list(dict.fromkeys(n for n in names if n and not n.startswith(("-", "/", "."))))


# -- the solution -------------------------------------------------------------------------------------
def _oracle(solve: Path, folder: Path, workdir: str, limits: Limits) -> Script:
    """The solution script run as the student: its folder's text files written to /tmp/solution
    (the student's own place), then `bash solve.sh` from the workdir."""
    turns: list[dict[str, Any]] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        try:
            content = path.read_text()
        except UnicodeError:
            raise ConfigError(f"{path}: a binary solution file cannot be played by the oracle yet") from None
        turns.append({"tool": "write_file", "arguments": {"path": f"/tmp/solution/{path.relative_to(folder)}", "content": content}})
    run = f"cd {shlex.quote(workdir)} && bash /tmp/solution/{solve.relative_to(folder)}"
    turns.append({"tool": "bash", "arguments": {"command": run, "timeout": limits.max_command_timeout_s}})
    turns.append({"tool": "submit", "arguments": {}})
    return Script(name=f"{folder.parent.name}-solution", turns=turns)


# -- the task -----------------------------------------------------------------------------------------
def _task_id(root: Path) -> str:
    text = re.sub(r"[^a-z0-9._-]+", "-", root.name.lower()).strip("-._")[:64] or "task"
    return text if text[0].isalnum() else f"t{text}"[:64]


def _tags(metadata: dict[str, Any]) -> tuple[str, ...]:
    tags = [str(t) for t in metadata.get("tags", []) or []]
    for key in ("difficulty", "category"):
        if metadata.get(key):
            tags.append(f"{key}:{metadata[key]}")
    return tuple(dict.fromkeys(tags))


def _task(root: Path, instruction: str, metadata: dict[str, Any], image: _Image, limits: Limits, verifier_s: float,
          oracle: Script | None, notes: list[str], script_name: str) -> Task:
    tests = root / "tests"
    if not tests.is_dir() or not any(p.name.startswith("test_") or p.name.endswith("_test.py") for p in tests.rglob("*.py")):
        raise ConfigError(f"{tests}: no test_*.py files; a {script_name} alone trusts an exit status the student's code can set, so Proctor does not grade with it")
    if (root / script_name).exists():
        notes.append(f"{script_name}: not run; the hardened PytestJudge runs tests/test_*.py itself (pytest from the judge's own copy, nothing installed or downloaded at grading time)")
        wanted = [p for p in _grading_installs(root / script_name) if p.lower().replace("_", "-") not in ("pytest", "pytest-json-report", "pytest-json-ctrf")]
        if wanted:
            where = "its image" if image.image is not None else "the student runtime"
            missing = missing_packages(wanted) if image.image is None else wanted
            if missing:
                notes.append(f"{script_name} installs {', '.join(missing)} at grading time; not run, so the tests see only what {where} has: "
                             "install them in the Dockerfile (or runtime-requirements.txt)")
    notes.append("the student is an unprivileged user, not root as under Harbor: files only root may read (/root, mode 0600) are closed "
                 "to it, and only the workdir, /tmp and /dev/shm are writable")
    try:
        return Task(
            id=_task_id(root),
            description=(str(metadata.get("description") or instruction.strip().splitlines()[0] if instruction.strip() else root.name))[:200],
            workdir=image.workdir,
            workdir_files=image.workdir_files if image.image is None else None,
            image=image.image,
            steps=[Step(instructions=instruction, submit=("*",),
                        judge=PytestJudge(tests=".", tests_at="/tests", scoring="all", timeout_s=verifier_s,
                                          baseline=str(image.workdir_files) if image.workdir_files and image.image is None else None))],
            limits=limits,
            hidden=tests,
            packages=tuple(image.packages),
            oracle=oracle,
            tags=_tags(metadata),
        )
    except ValueError as exc:
        raise ConfigError(f"{root}: cannot be a Proctor task: {' '.join(str(exc).split())}") from None


# -- old Terminal-Bench ---------------------------------------------------------------------------------
def _terminal_bench(root: Path, mode: ImageMode = "auto") -> ImportedTask:
    import yaml

    where = root / "task.yaml"
    try:
        config = yaml.safe_load(_text(where)) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: must be a mapping")
    unknown = sorted(str(k) for k in config if k not in _KNOWN_TERMINAL_BENCH)
    if unknown:
        raise ConfigError(f"{where}: {', '.join(unknown)}: not a field Proctor knows; refusing rather than ignoring it")
    notes: list[str] = []
    instruction = config.get("instruction")
    if not instruction and isinstance(config.get("descriptions"), list) and config["descriptions"]:
        instruction = config["descriptions"][0].get("description")
    if not instruction:
        raise ConfigError(f"{where}: instruction: missing")
    if not isinstance(instruction, str):
        raise ConfigError(f"{where}: instruction: must be text, got {type(instruction).__name__}")
    if config.get("parser_name") not in (None, "pytest"):
        raise ConfigError(f"{where}: parser_name {config['parser_name']!r}: only pytest-graded tasks are imported")
    for compose in ("docker-compose.yaml", "docker-compose.yml"):
        path = root / compose
        if path.exists():
            services = (yaml.safe_load(path.read_text()) or {}).get("services", {})
            if len(services) > 1:
                raise ConfigError(f"{path}: services {', '.join(services)}: extra services cannot run beside Proctor's sandbox; refusing the task")
            notes.append(f"{compose}: its one service is the student's sandbox; its settings (volumes, environment) are not applied")
    image = _environment(root / "Dockerfile", root, notes, mode,
                         keep_out=(root / "tests", root / "solution.sh", root / "run-tests.sh", root / "task.yaml"))
    limits = _limits(cpus=None, memory=None, storage=None, agent_s=config.get("max_agent_timeout_sec"), where=where)
    metadata = {"tags": config.get("tags") or [], "difficulty": config.get("difficulty"), "category": config.get("category")}
    solve = root / "solution.sh"
    oracle = _oracle_file(solve, image.workdir, limits) if solve.is_file() else None
    if oracle is None:
        notes.append("solution.sh: absent, so the task has no oracle")
    task = _task(root, instruction, metadata, image, limits, _seconds(config.get("max_test_timeout_sec", 600.0), where, "max_test_timeout_sec"), oracle, notes, "run-tests.sh")
    return ImportedTask(task=task, layout="terminal-bench", notes=notes)


def _oracle_file(solve: Path, workdir: str, limits: Limits) -> Script:
    return Script(name=f"{solve.parent.name}-solution", turns=[
        {"tool": "write_file", "arguments": {"path": "/tmp/solution.sh", "content": _text(solve)}},
        {"tool": "bash", "arguments": {"command": f"cd {shlex.quote(workdir)} && bash /tmp/solution.sh", "timeout": limits.max_command_timeout_s}},
        {"tool": "submit", "arguments": {}},
    ])


# -- environments ---------------------------------------------------------------------------------------
def task_environment(path: str | Path, image: ImageMode = "auto") -> tuple[Any, list[str]]:
    """A one-task `Environment` for `proctor run TASK_DIR`, and the import's notes."""
    from types import ModuleType

    from .loading import Environment

    imported = import_task(path, image)
    module = ModuleType(f"proctor_imported_{imported.task.id.replace('-', '_').replace('.', '_')}")
    module.TASKS = [imported.task]  # type: ignore[attr-defined]
    env = Environment(name=str(path), module=module, directory=Path(path).resolve(), tasks={imported.task.id: imported.task})
    return env, imported.notes


_ENVIRONMENT = '''"""Imported by `proctor import harbor`: each task is read from its original directory at load time."""

from proctor.tasks.harbor import load_task

TASKS = [
{tasks}]
'''


def write_environment(dirs: list[str], out: str | Path, image: ImageMode = "auto") -> list[ImportedTask]:
    """Import every directory (all must import, ids distinct) and write OUT/__init__.py, which
    loads them from where they are."""
    imported = [import_task(d, image) for d in dirs]
    seen: dict[str, str] = {}
    for d, item in zip(dirs, imported):
        if item.task.id in seen:
            raise ConfigError(f"{d} and {seen[item.task.id]} both make task id {item.task.id!r}; rename one directory")
        seen[item.task.id] = d
    dest = Path(out)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ConfigError(f"--out {dest}: exists and is not an empty directory; choose a new one")
    dest.mkdir(parents=True, exist_ok=True)
    how = "" if image == "auto" else f", image={image!r}"
    lines = "".join(f"    load_task({str(Path(d).resolve())!r}{how}),\n" for d in dirs)
    (dest / "__init__.py").write_text(_ENVIRONMENT.format(tasks=lines))
    return imported


__all__ = ["ImportedTask", "import_task", "layout", "load_task", "task_environment", "write_environment"]

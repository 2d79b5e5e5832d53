"""The typed surface of the sandbox: what a task asks for and what a command gives back."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MiB = 1024 * 1024
GiB = 1024 * MiB

# Paths inside the sandbox that Proctor itself builds; a task may not mount over them.
RESERVED_SANDBOX_PATHS = ("/", "/proc", "/dev", "/workdir", "/tmp", "/dev/shm", "/etc", "/usr")
DEFAULT_WORKDIR = "/workdir"
DEFAULT_DATA_AT = "/data"
# What a task's own workdir or data path may not be, contain or lie inside: the system the
# sandbox builds (read-only system directories, /proc, /dev, /etc, the private /tmp) and the
# student runtime's home, and /grader, where judges mount their own files.
_SYSTEM_PLACES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev", "/sys",
                  "/tmp", "/var/tmp", "/run", "/boot", "/opt/proctor", "/grader")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_place(value: str, field: str) -> str:
    """A task's own path inside the sandbox (its workdir, its data): absolute, normalised, and
    clear of every system place. Raises ValueError naming `field`."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise ValueError(f"{field} {value!r} must be an absolute path inside the sandbox (e.g. '/app')")
    parts = value.split("/")[1:]
    if value == "/" or any(p in ("", ".", "..") for p in parts) or "\0" in value:
        raise ValueError(f"{field} {value!r} must be a normalised absolute path below / (no '.', '..', empty parts or trailing '/')")
    for place in _SYSTEM_PLACES:
        if _under(value, place) or _under(place, value):
            raise ValueError(f"{field} {value!r} overlaps the sandbox's system directory {place}; choose a path of the task's own such as /app or /srv/input")
    return value


def places_overlap(a: str, b: str) -> bool:
    return _under(a, b) or _under(b, a)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SandboxLimits(_Model):
    """Per-sandbox limits, all enforced by the kernel (cgroups and capped tmpfs)."""

    memory_bytes: int = Field(2 * GiB, ge=16 * MiB, description="Memory cap: anonymous, page cache, tmpfs (workdir, /tmp, /dev/shm) and SysV shm together. No swap.")
    pids: int = Field(256, ge=8, le=65536, description="Most processes and threads alive at once.")
    cpus: float = Field(1.0, gt=0.01, le=1024, description="CPU quota in cores (CFS quota), so a CPU hog cannot starve the harness.")
    workdir_bytes: int = Field(1 * GiB, ge=1 * MiB, description="Size of the writable /workdir.")
    workdir_inodes: int = Field(100_000, ge=64, description="Files and directories /workdir may hold.")
    tmp_bytes: int = Field(256 * MiB, ge=1 * MiB, description="Size of the private /tmp.")
    shm_bytes: int = Field(64 * MiB, ge=1 * MiB, description="Size of the private /dev/shm.")
    tmp_inodes: int = Field(20_000, ge=64, description="Files /tmp and /dev/shm may each hold.")


class Mount(_Model):
    """A host path the task adds to the student's view."""

    source: str = Field(description="Absolute host path.")
    target: str = Field(description="Absolute path inside the sandbox.")
    writable: bool = Field(False, description="Read-write bind; read-only by default.")

    @field_validator("source", "target")
    @classmethod
    def _absolute(cls, value: str) -> str:
        path = PurePosixPath(value)
        if not path.is_absolute() or ".." in path.parts:
            raise ValueError(f"{value!r} must be an absolute path without '..'")
        return str(path)

    @field_validator("target")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_SANDBOX_PATHS or value == "/data":
            raise ValueError(f"{value!r} is built by Proctor itself; mount elsewhere")
        return value


class Device(_Model):
    """A host device node passed through to the student (a GPU's, for kernel tasks)."""

    path: str = Field(description="Device node path, the same on the host and inside, e.g. /dev/nvidia0.")

    @field_validator("path")
    @classmethod
    def _under_dev(cls, value: str) -> str:
        path = PurePosixPath(value)
        if not path.is_absolute() or ".." in path.parts or path.parts[:2] != ("/", "dev"):
            raise ValueError(f"{value!r} must be an absolute path under /dev")
        return str(path)


class Endpoint(_Model):
    """One TCP destination a task allows the student to reach."""

    host: str = Field(description="Host name or address the harness connects to on the student's behalf.")
    port: int = Field(ge=1, le=65535)
    local_port: int = Field(ge=1024, le=65535, description="Port on the sandbox's loopback that leads to it.")


class NetworkPolicy(_Model):
    """Loopback only by default. An allowlist is bridged by the harness through Unix sockets;
    the student's namespace still has no route anywhere."""

    allow: tuple[Endpoint, ...] = Field((), description="TCP endpoints reachable through loopback forwarders.")

    @model_validator(mode="after")
    def _distinct_ports(self) -> NetworkPolicy:
        ports = [e.local_port for e in self.allow]
        if len(ports) != len(set(ports)):
            raise ValueError("two allowlist endpoints share a local_port")
        return self


_CODE_LOADING_PREFIXES = ("LD_", "PYTHON", "PERL5", "RUBY", "NODE_", "BASH_ENV", "ENV", "GCONV_", "MALLOC_")
_SAFE_PYTHON_VARS = {"PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING"}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ImageRoot(_Model):
    """A built container image, exported as a read-only erofs file: the root filesystem the
    student sees instead of the host's system directories (proctor.images builds these)."""

    name: str = Field(min_length=1, description="The image's reference or the Dockerfile it was built from (for messages).")
    id: str = Field(pattern=r"^[0-9a-f]{12,64}$", description="The image's id in the container store.")
    root: str = Field(description="Host path of the erofs file holding the image's root filesystem.")
    workdir: str | None = Field(None, description="The image's WORKDIR: the default directory of student commands.")
    env: dict[str, str] = Field(default_factory=dict, description="The image's ENV, applied under the sandbox's fixed HOME, USER, SHELL and TMPDIR.")

    @field_validator("workdir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "\0" in value or ".." in PurePosixPath(value).parts):
            raise ValueError(f"image WORKDIR {value!r} must be an absolute path without '..'")
        return value

    @field_validator("env")
    @classmethod
    def _names(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if not _ENV_NAME.match(name) or "\0" in value:
                raise ValueError(f"image environment variable {name!r} is not a valid name or holds a NUL byte")
        return env


class SandboxSpec(_Model):
    """Everything that shapes one student's world."""

    limits: SandboxLimits = SandboxLimits()
    runtime: str | None = Field(None, description="Student Python runtime (a venv root), mounted read-only at the same path; None: the default from setup.")
    data_dir: str | None = Field(None, description="Host directory shown read-only at `data_at`.")
    workdir: str = Field(DEFAULT_WORKDIR, description="Where the student's writable, capped workdir (also its HOME and cwd) is inside the sandbox.")
    data_at: str = Field(DEFAULT_DATA_AT, description="Where `data_dir` is shown read-only inside the sandbox.")
    mounts: tuple[Mount, ...] = ()
    devices: tuple[Device, ...] = ()
    network: NetworkPolicy = NetworkPolicy()
    env: dict[str, str] = Field(default_factory=dict, description="Extra variables for every student process (no LD_*, no code-loading PYTHON*).")
    hostname: str = "sandbox"
    image: ImageRoot | None = Field(None, description="A container image's filesystem as the student's root (read-only) instead of the host's system directories.")
    seed_workdir: bool = Field(False, description=(
        "Over an image: the writable workdir starts as a copy of the image's files at `workdir` (its Dockerfile's COPY into /app), "
        "owned by the student. The student's sandbox only: a grading sandbox gets the custody copy instead (JudgeContext.grading_spec)."))

    @field_validator("workdir", "data_at")
    @classmethod
    def _place(cls, value: str, info: Any) -> str:
        return check_place(value, f"SandboxSpec.{info.field_name}")

    @model_validator(mode="after")
    def _distinct_places(self) -> SandboxSpec:
        if places_overlap(self.workdir, self.data_at):
            raise ValueError(f"SandboxSpec.workdir {self.workdir!r} and data_at {self.data_at!r} overlap; give each its own path")
        for m in self.mounts:
            for name in ("workdir", "data_at"):
                if places_overlap(m.target, getattr(self, name)):
                    raise ValueError(f"mount target {m.target!r} overlaps SandboxSpec.{name} {getattr(self, name)!r}")
        return self

    @field_validator("env")
    @classmethod
    def _safe_env(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r} is not a valid name")
            if name in ("PATH", "HOME"):
                raise ValueError(f"{name} is fixed by the sandbox; add directories through the runtime instead")
            if name.startswith(_CODE_LOADING_PREFIXES) and name not in _SAFE_PYTHON_VARS:
                raise ValueError(f"environment variable {name} can make student processes load code; it is not allowed")
            if "\0" in value:
                raise ValueError(f"environment variable {name} contains a NUL byte")
        return env


class ResourceUsage(_Model):
    """What one command (and the children it waited for) used."""

    cpu_user_s: float = 0.0
    cpu_system_s: float = 0.0
    max_rss_bytes: int = 0


class ExecResult(_Model):
    """The outcome of one command run as the student."""

    argv: tuple[str, ...]
    exit_code: int | None = Field(description="Exit status, or None when killed by a signal.")
    signal: int | None = Field(None, description="Signal that ended the command, if any.")
    timed_out: bool = False
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_dropped: int = Field(0, description="Bytes of stdout not kept (past the capture cap).")
    stderr_dropped: int = Field(0, description="Bytes of stderr not kept.")
    duration_s: float = 0.0
    usage: ResourceUsage = ResourceUsage()

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def text(self) -> str:
        """stdout decoded leniently: student output is not trusted to be UTF-8."""
        return self.stdout.decode("utf-8", errors="replace")


class KillReport(_Model):
    """The proof (or not) that a sandbox holds no student process."""

    empty: bool = Field(description="True only when the cgroups, the PID namespace and the uid all hold no process.")
    killed: int = Field(description="Processes sent SIGKILL.")
    rounds: int
    duration_s: float
    remaining: tuple[int, ...] = Field((), description="PIDs still alive when the deadline passed.")
    detail: str = ""


ProtectionStatus = Literal["enforced", "degraded", "missing", "absent"]  # absent: the runtime does not even try (the fake)


class Protection(_Model):
    name: str
    status: ProtectionStatus
    mechanism: str
    detail: str = ""


class ConfinementReport(_Model):
    """What this machine actually grants, probed for real."""

    protections: tuple[Protection, ...]
    cgroup_version: Literal[1, 2] | None = None

    def get(self, name: str) -> Protection | None:
        return next((p for p in self.protections if p.name == name), None)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.protections if p.status in ("missing", "absent"))

    @property
    def ok(self) -> bool:
        return not self.missing

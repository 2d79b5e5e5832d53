"""proctor.sandbox: the kernel-enforced world of one student."""

from .backend import (
    RUNTIMES,
    ProcessInfo,
    RuntimeName,
    SandboxBackend,
    SandboxUsage,
    StudentProcess,
    StudentSandbox,
    at_least,
    get_backend,
)
from .confinement import DEFAULT_REQUIRED, probe
from .core import BwrapBackend, Sandbox, machine_confinement
from .models import (
    ConfinementReport,
    Device,
    Endpoint,
    ExecResult,
    ImageRoot,
    KillReport,
    Mount,
    NetworkPolicy,
    Protection,
    ResourceUsage,
    SandboxLimits,
    SandboxSpec,
)
from .reclaim import reclaim_stale

__all__ = [
    "RUNTIMES", "BwrapBackend", "ProcessInfo", "RuntimeName", "SandboxBackend", "SandboxUsage", "StudentSandbox",
    "at_least", "get_backend",
    "DEFAULT_REQUIRED", "ConfinementReport", "Device", "Endpoint", "ExecResult", "ImageRoot", "KillReport", "Mount",
    "NetworkPolicy", "Protection", "ResourceUsage", "Sandbox", "SandboxLimits", "SandboxSpec", "StudentProcess",
    "machine_confinement", "probe", "reclaim_stale",
]

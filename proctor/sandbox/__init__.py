"""proctor.sandbox: the kernel-enforced world of one student."""

from .confinement import DEFAULT_REQUIRED, probe
from .core import Sandbox, StudentProcess, machine_confinement
from .models import (
    ConfinementReport,
    Device,
    Endpoint,
    ExecResult,
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
    "DEFAULT_REQUIRED", "ConfinementReport", "Device", "Endpoint", "ExecResult", "KillReport", "Mount",
    "NetworkPolicy", "Protection", "ResourceUsage", "Sandbox", "SandboxLimits", "SandboxSpec", "StudentProcess",
    "machine_confinement", "probe", "reclaim_stale",
]

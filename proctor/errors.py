"""Errors a user can act on: each names the problem and the fix in one line."""


class ProctorError(Exception):
    """Base class of every error Proctor raises on purpose."""


class SandboxUnavailable(ProctorError):
    """This machine cannot host a sandbox at all (not Linux, not root, bubblewrap missing)."""


class ConfinementError(ProctorError):
    """A sandbox needs a protection this machine does not grant."""


class SandboxError(ProctorError):
    """A sandbox operation failed (setup, exec, teardown)."""


class ConfigError(ProctorError):
    """A task or run configuration is malformed."""

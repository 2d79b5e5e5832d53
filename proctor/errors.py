"""Errors a user can act on: each names the problem and the fix in one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # this file imports nothing at run time: the derivability attack copies it into a sandbox
    from pydantic import ValidationError


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


def describe_error(exc: ValidationError) -> str:
    """The first problems of a validation error, as `field.path: message`, for a one-line ConfigError."""
    parts = []
    for err in exc.errors(include_url=False)[:3]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


class ImageError(ConfigError):
    """A task's container image cannot be built, found or exported (it names the image)."""

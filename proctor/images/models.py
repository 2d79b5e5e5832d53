"""What a task declares about its image."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TaskImage(BaseModel):
    """A task's image: a Dockerfile with its build context, or a reference to an image."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    context: Path | None = Field(None, description="Build context directory (absolute); its Dockerfile is built unless `dockerfile` names another.")
    dockerfile: Path | None = Field(None, description="The Dockerfile (absolute); default: context/Dockerfile.")
    ref: str | None = Field(None, min_length=1, description="An image reference (e.g. debian:bookworm): pulled where a registry is reachable, else the local image of that name.")
    exclude: tuple[str, ...] = Field((), description=(
        "Paths in the build context (relative) never sent to the build, whatever the Dockerfile copies: a task's tests and "
        "solution when they share the context (an old-layout Terminal-Bench task), so they cannot reach the student's image."))

    @model_validator(mode="after")
    def _one_source(self) -> TaskImage:
        if (self.context is None and self.dockerfile is None) == (self.ref is None):
            raise ValueError("image: give either a build context/Dockerfile or an image reference (ref), not both or neither")
        for name in ("context", "dockerfile"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_absolute():
                raise ValueError(f"image.{name}: {str(path)!r} must be an absolute path")
        for rel in self.exclude:
            parts = Path(rel).parts
            if not rel or Path(rel).is_absolute() or ".." in parts or "\n" in rel or any(c in rel for c in "*?[!#"):
                raise ValueError(f"image.exclude {rel!r} must be a plain path relative to the context, without '..' or patterns")
        if self.exclude and self.ref is not None:
            raise ValueError("image.exclude applies to a build context, not to an image reference")
        if self.ref is not None and any(c in self.ref for c in " \t\n\0"):
            raise ValueError(f"image.ref {self.ref!r} is not an image reference")
        return self

    def describe(self) -> str:
        if self.ref is not None:
            return self.ref
        return str(self.dockerfile or Path(self.context or ".") / "Dockerfile")

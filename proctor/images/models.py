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

    @model_validator(mode="after")
    def _one_source(self) -> TaskImage:
        if (self.context is None and self.dockerfile is None) == (self.ref is None):
            raise ValueError("image: give either a build context/Dockerfile or an image reference (ref), not both or neither")
        for name in ("context", "dockerfile"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_absolute():
                raise ValueError(f"image.{name}: {str(path)!r} must be an absolute path")
        if self.ref is not None and any(c in self.ref for c in " \t\n\0"):
            raise ValueError(f"image.ref {self.ref!r} is not an image reference")
        return self

    def describe(self) -> str:
        if self.ref is not None:
            return self.ref
        return str(self.dockerfile or Path(self.context or ".") / "Dockerfile")

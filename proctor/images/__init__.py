"""Task images: a Dockerfile or an image reference, built and cached with podman/buildah and
exported as a read-only erofs root for the student's sandbox (docs/sandbox.md, "Task images")."""

from .build import ImageStore, image_support, prepare
from .models import TaskImage

__all__ = ["ImageStore", "TaskImage", "image_support", "prepare"]

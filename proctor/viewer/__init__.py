"""`proctor view`: a read-only local web app over run directories (docs/viewer.md).

    from proctor.viewer import create_app, serve
    serve(["runs/"], host="127.0.0.1", port=8765)

The index lists every rollout (sortable, filterable, searched and paged on the server, live while a
batch is still writing); `/runs/<run_id>` shows one rollout: its transcript as a conversation,
verdicts, custody, misbehaviour with its evidence, confinement, usage and timings; `/redteam` shows
the table of `proctor redteam --out DIR`. Everything a student produced is hostile input and is
shown inert (proctor/viewer/inert.py); nothing is ever written into the run directories."""

from .app import create_app
from .catalog import check_roots
from .server import BackgroundViewer, serve

__all__ = ["BackgroundViewer", "check_roots", "create_app", "serve"]

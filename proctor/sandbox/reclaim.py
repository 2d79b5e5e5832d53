"""Reclaiming what a crashed harness left behind.

Every live sandbox holds an flock on `locks/<id>.lock`; the kernel drops it when the harness
dies, even by `kill -9`. At startup any sandbox id whose lock can be taken is stale: its
processes are killed (by cgroup and by uid), its mounts detached, its uid's kernel keys invalidated,
its cgroups, files and uid lease removed."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

from . import cgroups, keyrings, ownfs, tmpfs
from .host import state_dir
from .locks import try_lock
from .reaper import kill_pids, kill_uid, reap_until_empty
from .uids import uid_in_range

_done = False
_once = threading.Lock()


def _lock_path(sandbox_id: str) -> Path:
    return state_dir("locks") / f"{sandbox_id}.lock"


def lock_new(sandbox_id: str) -> int:
    fd = try_lock(_lock_path(sandbox_id))
    if fd is None:
        raise RuntimeError(f"sandbox id {sandbox_id} is already locked")
    return fd


def unlock(sandbox_id: str, fd: int) -> None:
    _lock_path(sandbox_id).unlink(missing_ok=True)
    (state_dir("locks") / f"{sandbox_id}.json").unlink(missing_ok=True)
    os.close(fd)


def write_meta(sandbox_id: str, uid: int) -> None:
    (state_dir("locks") / f"{sandbox_id}.json").write_text(json.dumps({"uid": uid}))


def _known_ids() -> set[str]:
    ids = cgroups.stale_sandbox_ids()
    for directory, suffix in ((state_dir("locks"), ".lock"), (state_dir("locks"), ".json")):
        ids.update(p.name[: -len(suffix)] for p in directory.iterdir() if p.name.endswith(suffix))
    ids.update(p.name for p in state_dir("sandboxes").iterdir())
    return {i for i in ids if i.startswith("sbx-")}


def reclaim_stale() -> list[str]:
    """Clean up every sandbox whose owner is gone; return their ids."""
    reclaimed = []
    for sandbox_id in sorted(_known_ids()):
        fd = try_lock(_lock_path(sandbox_id))
        if fd is None:
            continue  # a live harness owns it
        try:
            _reclaim(sandbox_id)
            reclaimed.append(sandbox_id)
        finally:
            unlock(sandbox_id, fd)
    ownfs.remove_dead_templates()
    return reclaimed


def _reclaim(sandbox_id: str) -> None:
    meta_path = state_dir("locks") / f"{sandbox_id}.json"
    uid = None
    try:
        uid = int(json.loads(meta_path.read_text())["uid"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    cg = cgroups.SandboxCgroup(sandbox_id)
    uid_lock = state_dir("uids") / str(uid)
    fd = try_lock(uid_lock) if uid is not None and uid_in_range(uid) else None
    if uid is not None and fd is not None:
        # Nobody holds the uid: whatever of it is left is the dead sandbox's. The lock file goes
        # only once no process and no key of the uid is left (a lease that creates the file
        # afresh does not look), and not before.
        try:
            report = reap_until_empty(
                freeze=lambda: cg.freeze(timeout_s=0.5), thaw=cg.thaw, cgroup_pids=cg.pids, uid=uid,
                pidns=None, reap_children=lambda: None, deadline_s=5.0,
            )
            # keys outlive the uid's processes; lease_uid checks again
            if report.empty and kill_uid(uid) and not keyrings.clear_keys(uid):
                uid_lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
    else:
        # No uid known, or a live sandbox leased it since (its lease killed what was left, as the
        # file was there): only the dead sandbox's cgroup is ours to kill.
        kill_pids(cg.pids())
    root = state_dir("sandboxes") / sandbox_id
    for point in tmpfs.mounts_under(root):
        tmpfs.unmount(point)
    if root.exists():
        shutil.rmtree(root)
    cg.remove()


def reclaim_once() -> None:
    """Run reclaim the first time this process creates a sandbox."""
    global _done
    with _once:
        if not _done:
            reclaim_stale()
            _done = True
